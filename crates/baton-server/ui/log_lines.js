// A log's bytes as lines, each with the offset of its first byte: what a line number, a
// link to a line and a line's time (from the log's marks) are about. No imports, so the
// unit tests load it as it is.

/// Splits a stream of bytes, pushed in pieces cut anywhere, into pieces of lines:
/// `{ line, start, text, ended }` — the line's number (from 1), the offset of its first
/// byte, text of it (a character cut between two pushes comes whole in the second), and
/// whether the line ended (its newline came). A line starts only when a byte after the
/// previous newline arrives, so a log ending in a newline has no empty last line.
export class LineSplitter {
  constructor() {
    this.decoder = new TextDecoder('utf-8');
    /// Bytes pushed so far: the offset of the next one.
    this.offset = 0;
    this.line = 0;
    this.lineStart = 0;
    this.atLineStart = true;
  }

  push(bytes) {
    const pieces = [];
    let i = 0;
    while (i < bytes.length) {
      if (this.atLineStart) {
        this.line += 1;
        this.lineStart = this.offset + i;
        this.atLineStart = false;
      }
      const newline = bytes.indexOf(10, i);
      const end = newline === -1 ? bytes.length : newline;
      // A newline is never inside a UTF-8 character: at one, nothing waits in the decoder.
      const text = this.decoder.decode(bytes.subarray(i, end), { stream: newline === -1 });
      pieces.push({ line: this.line, start: this.lineStart, text, ended: newline !== -1 });
      if (newline === -1) break;
      i = newline + 1;
      this.atLineStart = true;
    }
    this.offset += bytes.length;
    return pieces;
  }
}

/// The mark a byte at `offset` came with: the last of `marks` (sorted by offset) at or
/// before it, or null when none is.
export function markAt(marks, offset) {
  let low = 0;
  let high = marks.length - 1;
  let found = null;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (marks[middle].offset <= offset) {
      found = marks[middle];
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}
