// One attempt's log on the page, line by line: each line has its number (a link to it),
// its time and stream once the log's marks are known, and its text in colour (ansi.js).
// Numbers and times are drawn from attributes by the style sheet, so selecting and
// copying the log copies its text alone.

import { AnsiRenderer, escapeHtml } from './ansi.js';
import { LineSplitter, markAt } from './log_lines.js';

/// Draws the log into `element` (emptied): `lineHref(n)` is the address of line n.
export class LogView {
  constructor(element, lineHref) {
    this.element = element;
    this.lineHref = lineHref;
    this.splitter = new LineSplitter();
    this.ansi = new AnsiRenderer();
    /// The offset of each line's first byte (line n at n - 1).
    this.starts = [];
    /// The `.text` part of the last line, which the next bytes may continue.
    this.open = null;
    this.marks = [];
    /// Lines before this one have their final time: no later mark can come before them.
    this.settled = 0;
    element.replaceChildren();
  }

  /// Bytes that came, in order.
  push(bytes) {
    // New lines go in as one piece of markup (a slice of a log may hold thousands).
    let lines = '';
    for (const piece of this.splitter.push(bytes)) {
      const text = this.ansi.push(piece.text);
      if (piece.line <= this.starts.length) {
        // The first piece may continue the line the last bytes left open.
        if (text) this.open.insertAdjacentHTML('beforeend', text);
        continue;
      }
      this.starts.push(piece.start);
      const n = piece.line;
      // Numbers, an address of our own and the renderer's escaped output only: nothing
      // from the log becomes markup.
      lines += `<div class="line" data-line="${n}"><a class="ln" data-n="${n}" href="${escapeHtml(this.lineHref(n))}" aria-label="line ${n}"></a><span class="ts"></span><span class="text">${text}</span></div>`;
    }
    if (lines) {
      this.element.insertAdjacentHTML('beforeend', lines);
      this.open = this.element.lastElementChild.lastElementChild;
    }
    this.stamp();
  }

  /// The bytes drawn so far.
  get offset() {
    return this.splitter.offset;
  }

  get lineCount() {
    return this.starts.length;
  }

  line(n) {
    return this.element.querySelector(`.line[data-line="${Number(n)}"]`);
  }

  /// The log's marks (`{ offset, at, stream }`, by offset): each line gets the time and
  /// stream of the mark its first byte came with.
  setMarks(marks) {
    this.marks = marks;
    this.element.classList.toggle('has-times', marks.length > 0);
    this.stamp();
  }

  stamp() {
    if (!this.marks.length) return;
    // The element holds the lines alone: line n is its child n - 1.
    const lines = this.element.children;
    const last = this.marks[this.marks.length - 1].offset;
    for (let i = this.settled; i < this.starts.length; i++) {
      const mark = markAt(this.marks, this.starts[i]);
      const line = lines[i];
      if (!mark || !line) continue;
      const ts = line.children[1];
      ts.dataset.at = clock(mark.at);
      ts.title = mark.at;
      line.classList.toggle('stderr', mark.stream === 'stderr');
      line.dataset.stream = mark.stream;
    }
    // A mark that comes later has a larger offset than every one known: lines that start
    // before the last known mark keep their time.
    while (this.settled < this.starts.length && this.starts[this.settled] < last) this.settled += 1;
  }

  /// Marks line n as the one the address points at and scrolls to it; false when the
  /// log has no such line (yet).
  target(n) {
    const line = this.line(n);
    for (const other of this.element.querySelectorAll('.line.target')) other.classList.remove('target');
    if (!line) return false;
    line.classList.add('target');
    line.scrollIntoView({ block: 'center' });
    return true;
  }
}

/// `14:03:07.250`, the local time of an instant, to the millisecond.
function clock(iso) {
  const at = new Date(iso);
  const pad = (n, width = 2) => String(n).padStart(width, '0');
  return `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}.${pad(at.getMilliseconds(), 3)}`;
}
