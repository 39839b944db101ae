// Submitting a task from the console (`POST /v1/tasks`), for tokens that may submit: its
// queue, what it runs (a command's words or a script), labels, environment, priority,
// timeout and attempts. Once accepted, its page opens; a refusal is shown beside the
// button, and under the field it names.

import { post } from '../api.js';
import { fill, h } from '../dom.js';
import { faultOf, showFaults, taskForm } from '../task_form.js';

export function mount(main) {
  const fields = taskForm({}, 'task');
  const error = h('p', { class: 'error form-error', id: 'new-task-error', role: 'alert', hidden: true });
  const button = h('button', { type: 'submit', id: 'submit-task' }, 'Submit');
  const form = h(
    'form',
    { class: 'form', id: 'new-task-form', novalidate: true },
    fields.element,
    h('div', { class: 'form-actions' }, button, h('a', { href: '#/tasks' }, 'Cancel'), error),
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.hidden = true;
    const { body, errors } = fields.read();
    if (Object.keys(errors).length) {
      fill(error, 'Some fields need a change (see above).');
      error.hidden = false;
      return;
    }
    button.disabled = true;
    try {
      const task = await post('/v1/tasks', body);
      location.hash = `#/tasks/${task.id}`;
    } catch (e) {
      showFaults(fields.fields, faultOf(e.message, Object.keys(fields.fields)));
      fill(error, `Not submitted: ${e.message}`);
      error.hidden = false;
    } finally {
      button.disabled = false;
    }
  });
  main.append(h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, '← Tasks')), h('div', { class: 'page-head' }, h('h1', {}, 'New task')), form);
  fields.fields.command.control.focus();
  return () => {};
}
