// Finding text in a log: every match highlighted, one of them current, next and previous,
// and how many. The highlights are CSS Custom Highlights (ranges the browser paints), so
// the log's own elements and colours stay as they are; without that API (older browsers)
// the lines holding a match are marked instead.

/// Where `needle` occurs in `text`, ignoring case: the start of each match, none
/// overlapping.
export function findAll(text, needle) {
  const starts = [];
  if (!needle) return starts;
  const hay = text.toLowerCase();
  const want = needle.toLowerCase();
  for (let at = hay.indexOf(want); at !== -1; at = hay.indexOf(want, at + want.length)) starts.push(at);
  return starts;
}

/// The most matches highlighted: past it, the count says "10000+".
const MOST = 10000;

const painted = () => typeof CSS !== 'undefined' && CSS.highlights && typeof Highlight === 'function';

/// A search over the lines of a log view (`.line` elements with a `.text` part).
export class LogSearch {
  constructor(container) {
    this.container = container;
    this.needle = '';
    /// Every match: `{ line, range }`.
    this.matches = [];
    this.current = -1;
    this.capped = false;
  }

  /// Finds `needle` afresh (after a new needle, or lines that arrived); the current match
  /// stays the same one when it still exists.
  search(needle) {
    const changed = needle !== this.needle;
    this.needle = needle;
    const before = this.current;
    for (const line of this.container.querySelectorAll('.line.has-match')) line.classList.remove('has-match', 'current-match');
    this.matches = [];
    this.capped = false;
    if (needle) {
      for (const line of this.container.querySelectorAll('.line')) {
        const text = line.querySelector('.text');
        const starts = findAll(text.textContent, needle);
        if (!starts.length) continue;
        line.classList.add('has-match');
        for (const start of starts) {
          if (this.matches.length >= MOST) {
            this.capped = true;
            break;
          }
          this.matches.push({ line, range: rangeOf(text, start, needle.length) });
        }
        if (this.capped) break;
      }
    }
    this.current = this.matches.length ? (changed || before < 0 ? 0 : Math.min(before, this.matches.length - 1)) : -1;
    this.paint(changed);
  }

  next() {
    this.step(1);
  }

  previous() {
    this.step(-1);
  }

  step(by) {
    if (!this.matches.length) return;
    this.current = (this.current + by + this.matches.length) % this.matches.length;
    this.paint(true);
  }

  /// `3 of 17`, `no match`, or '' without a needle.
  summary() {
    if (!this.needle) return '';
    if (!this.matches.length) return 'no match';
    return `${this.current + 1} of ${this.matches.length}${this.capped ? '+' : ''}`;
  }

  paint(scroll) {
    for (const line of this.container.querySelectorAll('.line.current-match')) line.classList.remove('current-match');
    const current = this.matches[this.current];
    if (painted()) {
      CSS.highlights.set('log-match', new Highlight(...this.matches.map((m) => m.range)));
      if (current) CSS.highlights.set('log-current', new Highlight(current.range));
      else CSS.highlights.delete('log-current');
    }
    if (!current) return;
    current.line.classList.add('current-match');
    if (scroll) current.line.scrollIntoView({ block: 'center' });
  }

  clear() {
    this.search('');
    if (painted()) {
      CSS.highlights.delete('log-match');
      CSS.highlights.delete('log-current');
    }
  }
}

/// The range covering `length` characters of `element`'s text from `start`, across the
/// elements (colours) the text is split into.
function rangeOf(element, start, length) {
  const range = document.createRange();
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  let seen = 0;
  let startSet = false;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const size = node.data.length;
    if (!startSet && start < seen + size) {
      range.setStart(node, start - seen);
      startSet = true;
    }
    if (startSet && start + length <= seen + size) {
      range.setEnd(node, start + length - seen);
      return range;
    }
    seen += size;
  }
  return range;
}
