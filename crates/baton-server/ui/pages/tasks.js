// The task list: filtered by status, queue, label, schedule, text in the command and
// when it was created, newest or oldest first, with how many tasks match in all;
// statuses change in place as events arrive; a click on a heading sorts the rows shown;
// tasks can be selected and cancelled or re-run, or every task the filter takes,
// through the bulk endpoints.

import { get } from '../api.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { ago, between, instantOfLocalInput, localInputOf } from '../time.js';
import { watch } from '../watch.js';
import { ENDED, actOnEach, bulk, bulkFilter, summary } from '../task_actions.js';
import { parseSort, sortRows, sortText } from '../table_sort.js';
import { shortOf } from '../task_ref.js';

/// How often a list kept live by events counts its tasks again, at most.
const COUNT_EVERY_MS = 10_000;
/// Every status, in the order of a task's life: `waiting` (a job for its needs) first,
/// `skipped` (a job whose rule its needs' ends did not meet) among the ends.
export const STATUSES = ['waiting', 'scheduled', 'queued', 'leased', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped'];
const FILTERS = ['status', 'queue', 'label', 'schedule', 'text', 'created_after', 'created_before', 'order'];

/// The columns a click sorts by: what each sorts on (statuses in their lifecycle's order).
const SORTS = {
  task: (t) => shortOf(t.id),
  status: (t) => STATUSES.indexOf(t.status),
  queue: (t) => t.queue,
  labels: (t) => (t.labels || []).join(' ') || null,
  command: (t) => commandLine(t),
  attempt: (t) => t.attempt,
  created: (t) => Date.parse(t.created_at),
  ran: (t) => (t.started_at && t.finished_at ? Date.parse(t.finished_at) - Date.parse(t.started_at) : null),
};
const COLUMNS = [
  ['task', 'Task'],
  ['status', 'Status'],
  ['queue', 'Queue'],
  ['labels', 'Labels'],
  ['command', 'Command'],
  ['attempt', 'Attempt'],
  ['created', 'Created'],
  ['ran', 'Ran for'],
];

/// "1,234" in the reader's way of writing numbers.
const number = (n) => n.toLocaleString();
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
  /// How many tasks match in all (`GET /v1/tasks/count`), when the node says.
  let total = null;
  let sort = parseSort(route.query.get('sort'));
  if (sort && !SORTS[sort.column]) sort = null;
  const selected = new Set();

  const body = h('tbody');
  const count = h('span', { class: 'count', id: 'task-count' });
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
  // When: the address keeps instants (RFC 3339); the fields show them in local time.
  const dates = {
    created_after: h('input', { name: 'created_after', type: 'datetime-local', value: localInputOf(filter.created_after) }),
    created_before: h('input', { name: 'created_before', type: 'datetime-local', value: localInputOf(filter.created_before) }),
  };
  const order = h('select', { name: 'order' }, h('option', { value: '' }, 'newest first'), h('option', { value: 'oldest' }, 'oldest first'));
  order.value = filter.order === 'oldest' ? 'oldest' : '';
  const form = h(
    'form',
    { class: 'filters', id: 'task-filters' },
    field('Status', status),
    field('Queue', inputs.queue),
    field('Label', inputs.label),
    field('Schedule', schedule),
    field('Command', inputs.text),
    field('Created after', dates.created_after),
    field('Created before', dates.created_before),
    field('Order', order),
    h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: '#/tasks', class: 'clear' }, 'Clear'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const params = new URLSearchParams();
    const values = {
      status: status.value,
      schedule: schedule.value,
      order: order.value,
      ...Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, v.value.trim()])),
      ...Object.fromEntries(Object.entries(dates).map(([k, v]) => [k, instantOfLocalInput(v.value)])),
    };
    for (const name of FILTERS) if (values[name]) params.set(name, values[name]);
    if (sort) params.set('sort', sortText(sort));
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
      h('td', { title: task.created_at, 'data-created': task.created_at }, ago(task.created_at)),
      h('td', {}, between(task.started_at, task.finished_at)),
    );
  }

  function render() {
    const shown = sort ? sortRows(rows, SORTS[sort.column], sort.descending) : rows;
    fill(body, shown.length ? shown.map(row) : h('tr', {}, h('td', { colspan: 9, class: 'empty' }, 'No task matches.')));
    renderHeadings();
    if (total && (total.count > rows.length || total.capped)) {
      fill(count, `${number(rows.length)} shown of ${number(total.count)}${total.capped ? '+' : ''} task${total.count === 1 ? '' : 's'}`);
    } else if (total) {
      fill(count, `${number(rows.length)} task${rows.length === 1 ? '' : 's'}`);
    } else {
      fill(count, `${rows.length}${cursor ? '+' : ''} task${rows.length === 1 ? '' : 's'}`);
    }
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
    created_after: filter.created_after,
    created_before: filter.created_before,
  });

  let countedAt = 0;

  /// How many tasks the filter takes in all; a node without the count (or too busy to
  /// count) leaves it unsaid. Counted again at most every COUNT_EVERY_MS while events
  /// reload the list: a count reads every matching row, the list only a page.
  async function countAll() {
    countedAt = Date.now();
    try {
      total = await get('/v1/tasks/count', { query: query() });
    } catch {
      total = null;
    }
  }

  /// The first `limit` tasks the filter takes: what is shown, read again.
  async function load(limit = PAGE, appending = false) {
    try {
      const counted = appending || Date.now() - countedAt < COUNT_EVERY_MS ? null : countAll();
      const list = appending && cursor
        ? await get('/v1/tasks', { query: { ...query(), order: filter.order, limit: PAGE, cursor } })
        : await get('/v1/tasks', { query: { ...query(), order: filter.order, limit: Math.min(limit, MAX_SHOWN) } });
      await counted;
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

  // The headings: each a button that sorts the rows shown by its column, ascending,
  // then descending, then back to the list's order.
  const headings = h('tr');
  function renderHeadings() {
    fill(
      headings,
      access.changeTasks ? h('th', { class: 'check' }, all) : null,
      COLUMNS.map(([column, title]) => {
        const on = sort?.column === column;
        const label = `${title}${on ? (sort.descending ? ' ▼' : ' ▲') : ''}`;
        return h(
          'th',
          { 'aria-sort': on ? (sort.descending ? 'descending' : 'ascending') : null, 'data-column': column },
          h('button', { type: 'button', class: 'sort', title: `Sort the rows shown by ${title.toLowerCase()}`, onclick: () => sortBy(column) }, label),
        );
      }),
    );
  }
  function sortBy(column) {
    if (sort?.column !== column) sort = { column, descending: false };
    else if (!sort.descending) sort = { column, descending: true };
    else sort = null;
    // The address keeps the order (for a reload or a link) without reading the list again.
    const params = new URLSearchParams(route.query);
    if (sort) params.set('sort', sortText(sort));
    else params.delete('sort');
    history.replaceState(null, '', `#/tasks${params.toString() ? `?${params}` : ''}`);
    render();
  }

  const submitLink = access.changeTasks ? h('a', { href: '#/tasks/new', class: 'button', id: 'new-task' }, 'New task') : null;
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Tasks'), count, submitLink),
    form,
    actions,
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'tasks' }, h('thead', {}, headings), body)),
    more,
  );
  renderHeadings();
  load().catch(() => {});
  // A busy cluster's stream of new tasks reads the list again at most once a second.
  return watch({ kind: 'task', queue: filter.queue }, { reload: () => load(Math.max(rows.length, PAGE)), onEvent, debounceMs: 1000 });
}
