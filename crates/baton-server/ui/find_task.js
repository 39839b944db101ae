// The header's search box: a task id — whole, or the 12 characters the tables show —
// opens that task; any other text lists the tasks whose command holds it. `/` anywhere
// on the page (but in a field being typed in) puts the cursor there, as on GitHub.

import { taskRef } from './task_ref.js';

/// Whether a key press belongs to what has focus: a field, a menu, an editable area.
function typing(target) {
  return target instanceof Element && !!target.closest('input, textarea, select, [contenteditable=""], [contenteditable="true"]');
}

/// Wires the form (`#find-task`, its input `#find-task-input`); returns what undoes it.
export function findTask(form) {
  const input = form.querySelector('input');
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const ref = taskRef(text);
    location.hash = ref ? `#/tasks/${ref.id || ref.short}` : `#/tasks?text=${encodeURIComponent(text)}`;
    input.value = '';
    input.blur();
  });
  const onKey = (event) => {
    if (event.key !== '/' || event.ctrlKey || event.metaKey || event.altKey || typing(event.target) || form.hidden) return;
    event.preventDefault();
    input.focus();
    input.select();
  };
  document.addEventListener('keydown', onKey);
  return () => document.removeEventListener('keydown', onKey);
}
