// The task list: filtered by status, queue, label, schedule and text in the command;
// statuses change in place as events arrive; tasks can be selected and cancelled or
// re-run, or every task the filter takes, through the bulk endpoints.

import { get } from '../api.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { ago, between } from '../time.js';
import { watch } from '../watch.js';
import { ENDED, actOnEach, bulk, bulkFilter, summary } from '../task_actions.js';

const STATUSES = ['scheduled', 'queued', 'leased', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled', 'timed_out', 'expired'];
const FILTERS = ['status', 'queue', 'label', 'schedule', 'text'];
const PAGE = 50;
const MAX_SHOWN = 1000;

/// What a task runs, on one line.
export function commandLine(task) {
  if (task.command) return task.command.map((word) => (/^[\w@%+=:,./-]+$/.test(word) ? word : JSON.stringify(word))).join(' ');
  if (task.script) return task.script.split('\n').find((line) => line.trim()) || '';
  return '';
}

export function mount(main, { access, toast }, route) {
  const filter = Object.fromEntries(FILTERS.map((name) => [name, route.query.get(name) || '']));
  let rows = [];
  let cursor = null;
  const selected = new Set();

  const body = h('tbody');
  const count = h('span', { class: 'count' });
  const more = actionButton('Load more', () => load(rows.length + PAGE, true), { hidden: true, id: 'load-more' });
  const error = h('p', { class: 'error', hidden: true });

  // The filter form: its values go to the address, so a filtered list can be shared.
  const field = (name, control) => h('label', {}, name, control);
  const status = h('select', { name: 'status' }, h('option', { value: '' }, 'any'), STATUSES.map((s) => h('option', { value: s }, s)));
  status.value = filter.status;
  const schedule = h('select', { name: 'schedule' }, h('option', { value: '' }, 'any'));
  const inputs = {
    queue: h('input', { name: 'queue', value: filter.queue, placeholder: 'default' }),
    label: h('input', { name: 'label', value: filter.label, placeholder: 'os=linux' }),
    text: h('input', { name: 'text', type: 'search', value: filter.text, placeholder: 'text in the command', maxlength: 200 }),
  };
  const form = h(
    'form',
    { class: 'filters', id: 'task-filters' },
    field('Status', status),
    field('Queue', inputs.queue),
    field('Label', inputs.label),
    field('Schedule', schedule),
    field('Command', inputs.text),
    h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: '#/tasks', class: 'clear' }, 'Clear'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    const values = { status: status.value, schedule: schedule.value, ...Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, v.value.trim()])) };
    for (const name of FILTERS) if (values[name]) params.set(name, values[name]);
    location.hash = `#/tasks${params.toString() ? `?${params}` : ''}`;
  });
  get('/v1/schedules')
    .then(({ schedules }) => {
      for (const s of schedules) schedule.appendChild(h('option', { value: s.id }, s.name));
      schedule.value = filter.schedule;
      if (filter.schedule && schedule.value !== filter.schedule) {
        schedule.appendChild(h('option', { value: filter.schedule }, filter.schedule));
        schedule.value = filter.schedule;
      }
    })
    .catch(() => {});

  // What may be done with the selection, or with every task the filter takes.
  const actions = h('div', { class: 'actions', hidden: !access.changeTasks });
  const selectionText = h('span', { class: 'selection' });
  function selectionChanged() {
    fill(selectionText, selected.size ? `${selected.size} selected` : 'Select tasks to act on them');
    for (const b of actions.querySelectorAll('[data-needs-selection]')) b.disabled = selected.size === 0;
  }
  async function actOnSelection(action) {
    const ids = [...selected].filter((id) => {
      const task = rows.find((t) => t.id === id);
      return task && (action === 'retry' ? ENDED.has(task.status) : !ENDED.has(task.status));
    });
    if (!ids.length) {
      toast(action === 'retry' ? 'None of the selected tasks has ended: only ended tasks can be re-run.' : 'All of the selected tasks have ended already.', 'error');
      return;
    }
    const outcome = await actOnEach(ids, action);
    toast(summary(action, outcome), outcome.refused.length ? 'error' : 'info');
    selected.clear();
    await load(Math.max(rows.length, PAGE));
  }
  async function actOnFilter(action) {
    const body = bulkFilter(filter);
    try {
      const preview = await bulk(action, body, true);
      if (!preview.matched) {
        toast(`No task the filter takes can be ${action === 'cancel' ? 'cancelled' : 're-run'}.`);
        return;
      }
      const batch = preview.tasks.length;
      const question = `${preview.matched} task(s) match. ${action === 'cancel' ? 'Cancel' : 'Re-run'} ${batch === preview.matched ? 'them' : `the oldest ${batch}`}?`;
      if (!window.confirm(question)) return;
      const done = await bulk(action, body, false);
      toast(`${action === 'cancel' ? 'Cancelled' : 'Re-ran'} ${done.acted} of ${done.matched}${done.more ? '; more remain: ask again' : ''}.`);
      await load(Math.max(rows.length, PAGE));
    } catch (e) {
      toast(e.message, 'error');
    }
  }
  actions.append(
    selectionText,
    actionButton('Cancel selected', () => actOnSelection('cancel'), { 'data-needs-selection': true, id: 'cancel-selected' }),
    actionButton('Re-run selected', () => actOnSelection('retry'), { 'data-needs-selection': true, id: 'retry-selected' }),
  );
  if (bulkFilter(filter)) {
    actions.append(
      actionButton('Cancel all matching…', () => actOnFilter('cancel'), { class: 'secondary' }),
      actionButton('Re-run all matching…', () => actOnFilter('retry'), { class: 'secondary' }),
    );
  }
  selectionChanged();

  const all = h('input', { type: 'checkbox', title: 'Select every task shown', 'aria-label': 'Select all' });
  all.addEventListener('change', () => {
    for (const task of rows) all.checked ? selected.add(task.id) : selected.delete(task.id);
    render();
  });

  function row(task) {
    const check = h('input', { type: 'checkbox', checked: selected.has(task.id), 'aria-label': `Select ${task.id}` });
    check.addEventListener('change', () => {
      check.checked ? selected.add(task.id) : selected.delete(task.id);
      selectionChanged();
    });
    return h(
      'tr',
      { 'data-task-id': task.id },
      access.changeTasks ? h('td', { class: 'check' }, check) : null,
      h('td', {}, h('a', { href: `#/tasks/${task.id}` }, shortId(task.id))),
      h('td', { class: 'status-cell' }, statusBadge(task.status)),
      h('td', {}, task.queue),
      h('td', {}, (task.labels || []).map((l) => h('span', { class: 'label' }, l))),
      h('td', { class: 'command', title: commandLine(task) }, commandLine(task)),
      h('td', { class: 'attempt' }, `${task.attempt}/${task.max_attempts}`),
      h('td', { title: task.created_at }, ago(task.created_at)),
      h('td', {}, between(task.started_at, task.finished_at)),
    );
  }

  function render() {
    fill(body, rows.length ? rows.map(row) : h('tr', {}, h('td', { colspan: 9, class: 'empty' }, 'No task matches.')));
    fill(count, `${rows.length}${cursor ? '+' : ''} task${rows.length === 1 ? '' : 's'}`);
    more.hidden = !cursor || rows.length >= MAX_SHOWN;
    all.checked = rows.length > 0 && rows.every((t) => selected.has(t.id));
    selectionChanged();
  }

  const query = () => ({
    status: filter.status,
    queue: filter.queue,
    label: filter.label,
    schedule_id: filter.schedule,
    text: filter.text,
  });

  /// The newest `limit` tasks the filter takes: what is shown, read again.
  async function load(limit = PAGE, appending = false) {
    try {
      const list = appending && cursor
        ? await get('/v1/tasks', { query: { ...query(), limit: PAGE, cursor } })
        : await get('/v1/tasks', { query: { ...query(), limit: Math.min(limit, MAX_SHOWN) } });
      rows = appending ? rows.concat(list.tasks) : list.tasks;
      cursor = list.next_cursor;
      error.hidden = true;
      render();
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
  }

  /// A task event: the row's status changes at once; the list is read again when the
  /// event may change which tasks it holds or what their timings say.
  function onEvent(event) {
    if (event.kind !== 'task') return false;
    const task = rows.find((t) => t.id === event.task_id);
    if (!task) return false;
    // Two nodes changing one task at once may tell it out of order: the later state
    // has the larger step.
    if (task.step !== undefined && event.step <= task.step) return false;
    task.step = event.step;
    task.status = event.status;
    if (event.attempt !== undefined) task.attempt = event.attempt;
    const tr = body.querySelector(`tr[data-task-id="${CSS.escape(task.id)}"]`);
    if (tr) fill(tr.querySelector('.status-cell'), statusBadge(task.status));
    if (tr && event.attempt !== undefined) fill(tr.querySelector('.attempt'), `${task.attempt}/${task.max_attempts}`);
    return !ENDED.has(event.status) && (!filter.status || filter.status === event.status);
  }

  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Tasks'), count),
    form,
    actions,
    error,
    h(
      'table',
      { class: 'list', id: 'tasks' },
      h(
        'thead',
        {},
        h('tr', {}, access.changeTasks ? h('th', { class: 'check' }, all) : null, ['Task', 'Status', 'Queue', 'Labels', 'Command', 'Attempt', 'Created', 'Ran for'].map((t) => h('th', {}, t))),
      ),
      body,
    ),
    more,
  );
  load().catch(() => {});
  // A busy cluster's stream of new tasks reads the list again at most once a second.
  return watch({ kind: 'task', queue: filter.queue }, { reload: () => load(Math.max(rows.length, PAGE)), onEvent, debounceMs: 1000 });
}
