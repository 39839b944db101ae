// Building the page: elements are made with createElement and text is set as text, so
// nothing from the API is ever parsed as HTML (the one exception, a log's colours, goes
// through ansi.js, which escapes every character it copies).

import { shortOf } from './task_ref.js';

/// An element: `h('td', { class: 'id', title: id }, 'text', child)`. Attributes named
/// `on...` take listeners; `data-*` set the dataset; `hidden`/`disabled`/`checked` take
/// booleans; null and undefined are left out. Children may be nodes, strings, numbers,
/// arrays of them, or null (nothing).
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'checked' || name === 'value') {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else if (child instanceof Node) element.appendChild(child);
    else element.appendChild(document.createTextNode(String(child)));
  }
}

/// Replaces what `element` holds.
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/// A task's status as a coloured badge.
export function statusBadge(status) {
  return h('span', { class: `status status-${status}`, 'data-status': status }, status);
}

/// A short form of a uuid for tables; the whole one in its tooltip.
export function shortId(id) {
  return h('span', { class: 'id', title: id }, id ? shortOf(id) : '—');
}

/// A button that runs `action`, disabled while it runs.
export function actionButton(label, action, attrs = {}) {
  const button = h('button', { type: 'button', ...attrs }, label);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await action();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/// Offers `blob` to the user as a file named `name` (the browser's download).
export function saveFile(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = h('a', { href: url, download: name, hidden: true });
  document.body.appendChild(link);
  link.click();
  link.remove();
  // The download has its own copy once started; a minute is ample for that.
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
