// A Server-Sent Events parser (the text/event-stream format of the HTML standard),
// fed text as it arrives. EventSource would do this, but it cannot send an
// `Authorization` header, and the token must not go in the URL.

/// Turns the stream's text into frames `{ id, event, data }`. Feed it with `push` in
/// pieces of any size: a line cut between two pieces waits for its end.
export class SseParser {
  constructor(onFrame) {
    this.onFrame = onFrame;
    this.buffer = '';
    this.data = [];
    this.event = '';
    this.id = null;
    /// The last `id:` seen, kept across frames: what a reconnect resumes from.
    this.lastEventId = null;
  }

  push(text) {
    this.buffer += text;
    // A line ends at CRLF, LF or CR; a CR last in the buffer may be half of a CRLF.
    for (;;) {
      const match = /\r\n|\n|\r/.exec(this.buffer);
      if (!match) break;
      if (match[0] === '\r' && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    // A comment: the server's keep-alive.
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        break;
      case 'event':
        this.event = value;
        break;
      case 'id':
        // The standard ignores an id holding NUL.
        if (!value.includes('\0')) this.id = value;
        break;
      default:
        // `retry:` and unknown fields: the reconnect delay is the caller's choice.
        break;
    }
  }

  dispatch() {
    if (this.id !== null) this.lastEventId = this.id;
    const frame = { id: this.lastEventId, event: this.event || 'message', data: this.data.join('\n') };
    const hasData = this.data.length > 0;
    this.data = [];
    this.event = '';
    this.id = null;
    if (hasData) this.onFrame(frame);
  }
}
