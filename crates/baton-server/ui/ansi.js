// A log's colours: ANSI SGR sequences (`ESC[...m`) become <span>s with classes, every
// other control sequence is dropped, and every character of the text is escaped — the
// output is the one HTML the page builds from a string.
//
// Colours are the 16 classic ones (classes fg-0..fg-15, bg-0..bg-15, styled in
// style.css); 256-colour and true-colour codes take the nearest of them, because the
// page's Content-Security-Policy allows no inline style attribute. A line rewritten with
// a carriage return shows its pieces in order rather than the last alone.

const ESC = '\u001b';

/// The 16 colours as xterm draws them, to find the nearest for 256 and RGB codes.
const PALETTE = [
  [0, 0, 0], [205, 0, 0], [0, 205, 0], [205, 205, 0], [0, 0, 238], [205, 0, 205], [0, 205, 205], [229, 229, 229],
  [127, 127, 127], [255, 0, 0], [0, 255, 0], [255, 255, 0], [92, 92, 255], [255, 0, 255], [0, 255, 255], [255, 255, 255],
];

function nearest([r, g, b]) {
  let best = 0;
  let bestDistance = Infinity;
  PALETTE.forEach(([pr, pg, pb], index) => {
    const distance = (r - pr) ** 2 + (g - pg) ** 2 + (b - pb) ** 2;
    if (distance < bestDistance) {
      best = index;
      bestDistance = distance;
    }
  });
  return best;
}

/// xterm's 256 colours: 16 classic, a 6×6×6 cube, 24 greys.
function rgbOf256(n) {
  if (n < 16) return PALETTE[n];
  if (n < 232) {
    const level = (v) => (v === 0 ? 0 : 55 + v * 40);
    const i = n - 16;
    return [level(Math.floor(i / 36)), level(Math.floor(i / 6) % 6), level(i % 6)];
  }
  const grey = 8 + (n - 232) * 10;
  return [grey, grey, grey];
}

/// A CSI sequence's last byte: @ to ~.
function isFinalByte(code) {
  return code >= 0x40 && code <= 0x7e;
}

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

/// Control characters other than newline and tab: dropped (carriage returns too).
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f]/g;

/// Renders a stream of log text piece by piece: the style and a sequence cut between
/// two pieces carry over to the next `push`.
export class AnsiRenderer {
  constructor() {
    this.reset();
    /// The start of an escape sequence whose end has not arrived yet.
    this.pending = '';
  }

  reset() {
    this.bold = false;
    this.dim = false;
    this.italic = false;
    this.underline = false;
    this.inverse = false;
    this.strike = false;
    this.fg = null;
    this.bg = null;
  }

  /// The HTML for `text`: escaped, with its styled runs in spans. Linear in the text's
  /// length, whatever it holds: a sequence found unterminated is remembered, so a log of
  /// a million openings (`ESC]` over and over) is not scanned to its end for each.
  push(text) {
    let input = this.pending + text;
    this.pending = '';
    // From these places on, no OSC terminator / CSI final byte follows in `input`.
    this.oscOpenFrom = Infinity;
    this.csiOpenFrom = Infinity;
    let html = '';
    let i = 0;
    while (i < input.length) {
      const esc = input.indexOf(ESC, i);
      const end = esc === -1 ? input.length : esc;
      if (end > i) html += this.run(input.slice(i, end));
      if (esc === -1) break;
      const length = this.sequence(input, esc);
      if (length === 0) {
        // Cut off: wait for the rest (a stray ESC at most 64 characters from the end).
        if (input.length - esc <= 64) {
          this.pending = input.slice(esc);
          break;
        }
        i = esc + 1;
        continue;
      }
      i = esc + length;
    }
    return html;
  }

  /// The length of the escape sequence at `at`, applying it if it is SGR; 0 if it is
  /// not complete yet.
  sequence(input, at) {
    const next = input[at + 1];
    if (next === undefined) return 0;
    if (next === '[') {
      // CSI: parameters and intermediates, then a final byte in @..~.
      if (at > this.csiOpenFrom) return 0;
      let j = at + 2;
      while (j < input.length && !isFinalByte(input.charCodeAt(j))) j++;
      if (j >= input.length) {
        this.csiOpenFrom = at;
        return 0;
      }
      if (input[j] === 'm') this.apply(input.slice(at + 2, j));
      return j - at + 1;
    }
    if (next === ']') {
      // OSC (a title, a hyperlink's wrapper): ends with BEL or ESC \.
      if (at > this.oscOpenFrom) return 0;
      for (let j = at + 2; j < input.length; j++) {
        if (input[j] === '\u0007') return j - at + 1;
        if (input[j] === ESC && input[j + 1] === '\\') return j - at + 2;
      }
      this.oscOpenFrom = at;
      return 0;
    }
    // Any other two-character escape.
    return 2;
  }

  /// SGR parameters, e.g. `1;31` or `38;5;208`.
  apply(params) {
    const codes = params === '' ? [0] : params.split(/[;:]/).map((p) => (p === '' ? 0 : Number(p)));
    for (let k = 0; k < codes.length; k++) {
      const code = codes[k];
      if (code === 0) this.reset();
      else if (code === 1) this.bold = true;
      else if (code === 2) this.dim = true;
      else if (code === 3) this.italic = true;
      else if (code === 4) this.underline = true;
      else if (code === 7) this.inverse = true;
      else if (code === 9) this.strike = true;
      else if (code === 21 || code === 22) this.bold = this.dim = false;
      else if (code === 23) this.italic = false;
      else if (code === 24) this.underline = false;
      else if (code === 27) this.inverse = false;
      else if (code === 29) this.strike = false;
      else if (code >= 30 && code <= 37) this.fg = code - 30;
      else if (code === 39) this.fg = null;
      else if (code >= 40 && code <= 47) this.bg = code - 40;
      else if (code === 49) this.bg = null;
      else if (code >= 90 && code <= 97) this.fg = code - 90 + 8;
      else if (code >= 100 && code <= 107) this.bg = code - 100 + 8;
      else if (code === 38 || code === 48) {
        let colour = null;
        if (codes[k + 1] === 5 && k + 2 < codes.length) {
          colour = nearest(rgbOf256(codes[k + 2] & 255));
          k += 2;
        } else if (codes[k + 1] === 2 && k + 4 < codes.length) {
          colour = nearest(codes.slice(k + 2, k + 5).map((v) => v & 255));
          k += 4;
        } else {
          break;
        }
        if (code === 38) this.fg = colour;
        else this.bg = colour;
      }
    }
  }

  classes() {
    const names = [];
    if (this.bold) names.push('bold');
    if (this.dim) names.push('dim');
    if (this.italic) names.push('italic');
    if (this.underline) names.push('underline');
    if (this.strike) names.push('strike');
    const [fg, bg] = this.inverse ? [this.bg, this.fg] : [this.fg, this.bg];
    if (this.inverse) names.push('inverse');
    if (fg !== null) names.push(`fg-${fg}`);
    if (bg !== null) names.push(`bg-${bg}`);
    return names;
  }

  run(text) {
    const escaped = escapeHtml(text.replace(CONTROLS, ''));
    if (escaped === '') return '';
    const names = this.classes();
    return names.length ? `<span class="${names.join(' ')}">${escaped}</span>` : escaped;
  }
}

/// A whole text at once.
export function ansiToHtml(text) {
  return new AnsiRenderer().push(text);
}
