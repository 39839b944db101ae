// The fields of a task, as a form: for a new task, and for a schedule's template. What
// is typed becomes the API's body in task_fields.js; a field's fault, found here or
// named by the server's answer (422 `field: message`), is shown under that field.

import { fill, h } from './dom.js';
import { splitWords } from './shell_words.js';
import { formValues, taskBody } from './task_fields.js';

/// A labelled field: `{ row, control, fault }`, the fault's line shown under it.
export function formField(label, control, { hint = null, name } = {}) {
  const fault = h('p', { class: 'field-error', 'data-error-for': name, hidden: true });
  const row = h('div', { class: 'field' }, h('label', { for: control.id }, label), control, hint ? h('p', { class: 'hint' }, hint) : null, fault);
  return { row, control, fault };
}

/// Shows `errors` (field → message) under their fields; returns whether there were any.
export function showFaults(fields, errors) {
  for (const [name, field] of Object.entries(fields)) {
    const message = errors[name];
    fill(field.fault, message || '');
    field.fault.hidden = !message;
    field.control.toggleAttribute('aria-invalid', !!message);
  }
  return Object.keys(errors).length > 0;
}

/// The field the server's 422 names (`cron: ...`, `task.timeout_s: ...`), if it is one of
/// `names`: its message is shown there as well as beside the button.
export function faultOf(message, names) {
  const match = /^(?:task\.)?([a-z_]+)(?:\[\d+\])?:\s*(.*)$/s.exec(message || '');
  return match && names.includes(match[1]) ? { [match[1]]: match[2] } : {};
}

/// The task's fields, filled from `task` (a template being edited); `prefix` keeps the
/// ids of two forms apart.
export function taskForm(task = {}, prefix = 'task') {
  const values = formValues(task);
  const id = (name) => `${prefix}-${name}`;
  const input = (name, attrs = {}) => h('input', { id: id(name), name, autocomplete: 'off', spellcheck: 'false', ...attrs });

  const mode = h('select', { id: id('mode'), name: 'mode' }, h('option', { value: 'command' }, 'a command'), h('option', { value: 'script' }, 'a script (sh -c)'));
  mode.value = values.mode;
  const words = h('p', { class: 'hint words', id: id('words') });
  const fields = {
    queue: formField('Queue', input('queue', { value: values.queue, placeholder: 'default', pattern: '[a-z0-9][a-z0-9._-]{0,63}' }), { name: 'queue' }),
    labels: formField('Labels', input('labels', { value: values.labels, placeholder: 'linux, gpu' }), { name: 'labels', hint: 'A runner must carry every one; separated by commas or spaces.' }),
    mode: formField('Runs', mode, { name: 'mode' }),
    command: formField('Command', input('command', { value: values.command, class: 'code', placeholder: "sh -c 'echo hello'" }), { name: 'command' }),
    script: formField('Script', h('textarea', { id: id('script'), name: 'script', rows: 6, class: 'code', spellcheck: 'false', placeholder: 'echo "hello $NAME"' }, values.script), { name: 'script' }),
    env: formField('Environment', h('textarea', { id: id('env'), name: 'env', rows: 3, class: 'code', spellcheck: 'false', placeholder: 'NAME=world' }, values.env), { name: 'env', hint: 'NAME=value, one a line; shown to anyone who reads the task.' }),
    priority: formField('Priority', input('priority', { type: 'number', value: values.priority, placeholder: '0', min: -1000, max: 1000, step: 1 }), { name: 'priority' }),
    timeout_s: formField('Timeout (s)', input('timeout', { type: 'number', value: values.timeout, placeholder: 'the node’s default', min: 1, step: 1 }), { name: 'timeout_s' }),
    max_attempts: formField('Max attempts', input('max_attempts', { type: 'number', value: values.maxAttempts, placeholder: '1', min: 1, max: 100, step: 1 }), { name: 'max_attempts' }),
  };
  fields.command.row.insertBefore(words, fields.command.fault);

  // The words the command splits into, as the task will get them.
  function showWords() {
    try {
      const list = splitWords(fields.command.control.value);
      fill(words, list.length ? [`${list.length} word${list.length === 1 ? '' : 's'}: `, list.map((w) => h('code', { class: 'word' }, w))] : '');
    } catch (e) {
      fill(words, `Not yet words: ${e.message}.`);
    }
  }
  function showMode() {
    fields.command.row.hidden = mode.value !== 'command';
    fields.script.row.hidden = mode.value !== 'script';
  }
  fields.command.control.addEventListener('input', showWords);
  mode.addEventListener('change', showMode);
  showWords();
  showMode();

  const numbers = h('div', { class: 'field-row' }, fields.priority.row, fields.timeout_s.row, fields.max_attempts.row);
  const element = h(
    'fieldset',
    { class: 'task-fields' },
    h('div', { class: 'field-row' }, fields.queue.row, fields.labels.row),
    fields.mode.row,
    fields.command.row,
    fields.script.row,
    fields.env.row,
    numbers,
  );

  return {
    element,
    fields,
    /// `{ body, errors }`: the task's body from what is typed (`base`: the template's
    /// other fields, kept), and the faults found, shown under their fields.
    read(base = {}) {
      const { body, errors } = taskBody(
        {
          queue: fields.queue.control.value,
          labels: fields.labels.control.value,
          mode: mode.value,
          command: fields.command.control.value,
          script: fields.script.control.value,
          env: fields.env.control.value,
          priority: fields.priority.control.value,
          timeout: fields.timeout_s.control.value,
          maxAttempts: fields.max_attempts.control.value,
        },
        base,
      );
      showFaults(fields, errors);
      return { body, errors };
    },
  };
}
