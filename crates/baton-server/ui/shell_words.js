// A command typed on one line, split into the words a task's `command` takes, as a POSIX
// shell splits them (quotes and backslashes; no variables, globs or pipes: the task's
// program runs without a shell — a script is for those). And back, for a form that
// shows a command to edit. No imports, so the unit tests load it as it is.

/// The words of `line`: `echo 'a b' "c\"d" e\ f` → ['echo', 'a b', 'c"d', 'e f']. Throws
/// an Error saying what is wrong (an unclosed quote, a backslash at the end).
export function splitWords(line) {
  const words = [];
  let word = null;
  let i = 0;
  const text = String(line ?? '');
  const add = (s) => {
    word = (word ?? '') + s;
  };
  while (i < text.length) {
    const c = text[i];
    if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
      i++;
    } else if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end === -1) throw new Error('a single quote is not closed');
      add(text.slice(i + 1, end));
      i = end + 1;
    } else if (c === '"') {
      i++;
      add('');
      for (;;) {
        if (i >= text.length) throw new Error('a double quote is not closed');
        const d = text[i];
        if (d === '"') {
          i++;
          break;
        }
        // Inside double quotes a backslash escapes only these, as in sh.
        if (d === '\\' && i + 1 < text.length && '"\\$`'.includes(text[i + 1])) {
          add(text[i + 1]);
          i += 2;
        } else {
          add(d);
          i++;
        }
      }
    } else if (c === '\\') {
      if (i + 1 >= text.length) throw new Error('a backslash ends the line');
      add(text[i + 1]);
      i += 2;
    } else {
      add(c);
      i++;
    }
  }
  if (word !== null) words.push(word);
  return words;
}

/// Words back to one line that `splitWords` reads as the same words.
export function joinWords(words) {
  return words.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", "'\\''")}'`)).join(' ');
}
