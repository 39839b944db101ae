// Pipelines, newest first and a page at a time (`GET /v1/pipelines`): where each
// stands, how many jobs it has and how many of them are in each status, when it was
// submitted and how long it took (counting while it runs). Its jobs' task events read
// the list again; other tasks' events do not.

import { get } from '../api.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { tickElapsed } from '../elapsed.js';
import { ago, between, span, when } from '../time.js';
import { watch } from '../watch.js';
import { STATUSES } from './tasks.js';

const PAGE = 50;
/// The most pipelines one read asks for: the API's largest `limit`.
const MOST_A_READ = 200;
const MAX_SHOWN = 1000;

/// Jobs counted by status (`{ "succeeded": 3, … }`) as small coloured badges, in the
/// order of a task's life; a status this page does not know goes last.
export function countBadges(counts) {
  const rank = (status) => {
    const at = STATUSES.indexOf(status);
    return at === -1 ? STATUSES.length : at;
  };
  return Object.entries(counts || {})
    .filter(([, n]) => n > 0)
    .sort(([a], [b]) => rank(a) - rank(b) || a.localeCompare(b))
    .map(([status, n]) => h('span', { class: `status status-${status} count-badge`, 'data-status': status, title: `${n} ${status}` }, `${n} ${status}`));
}

/// How long a pipeline took, or (while it runs) an element whose time counts on.
export function pipelineTook(p) {
  if (p.finished_at) return between(p.created_at, p.finished_at);
  if (p.status !== 'running') return '—';
  return h('span', { 'data-running-since': p.created_at }, span(Math.max(0, Date.now() - Date.parse(p.created_at))));
}

export function mount(main) {
  const body = h('tbody');
  const count = h('span', { class: 'count', id: 'pipeline-count' });
  const error = h('p', { class: 'error', hidden: true });
  let rows = [];
  let cursor = null;

  /// `count` pipelines from `before` (the newest without it), over as many reads as
  /// that takes.
  async function read(count, before = null) {
    let got = [];
    let next = before;
    do {
      const page = await get('/v1/pipelines', { query: { before: next, limit: Math.min(MOST_A_READ, count - got.length) } });
      got = got.concat(page.pipelines);
      next = page.next_cursor ?? null;
    } while (next && got.length < count);
    return { got, next };
  }

  function row(p) {
    return h(
      'tr',
      { 'data-pipeline-id': p.id, 'data-status': p.status },
      h('td', { class: 'name' }, h('a', { href: `#/pipelines/${p.id}` }, h('strong', {}, p.name)), ' ', shortId(p.id)),
      h('td', { class: 'status-cell' }, statusBadge(p.status)),
      h('td', { class: 'jobs' }, String(p.jobs)),
      h('td', { class: 'counts' }, countBadges(p.counts)),
      h('td', { title: when(p.created_at), 'data-created': p.created_at }, ago(p.created_at)),
      h('td', { class: 'took' }, pipelineTook(p)),
    );
  }

  function render() {
    fill(body, rows.length ? rows.map(row) : h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No pipeline. A pipeline is submitted with POST /v1/pipelines.')));
    fill(count, `${rows.length}${cursor ? '+' : ''} pipeline${rows.length === 1 ? '' : 's'}`);
    more.hidden = !cursor || rows.length >= MAX_SHOWN;
  }

  /// The first `shown` pipelines read again, or (`appending`) the next page after them.
  async function load(shown = PAGE, appending = false) {
    try {
      const { got, next } = appending ? await read(PAGE, cursor) : await read(Math.min(shown, MAX_SHOWN));
      rows = appending ? rows.concat(got) : got;
      cursor = next;
      error.hidden = true;
      render();
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
  }

  const more = actionButton('Load more', () => load(rows.length, true).catch(() => {}), { hidden: true, id: 'load-more-pipelines' });
  const headings = ['Pipeline', 'Status', 'Jobs', 'Jobs by status', 'Created', 'Took'];
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Pipelines'), count),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'pipelines' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body)),
    more,
  );
  load().catch(() => {});
  const stopTicking = tickElapsed(main);
  // Only a pipeline job's event changes this page: the others are let pass.
  const stopWatching = watch({ kind: 'task' }, { reload: () => load(Math.max(rows.length, PAGE)), onEvent: (event) => !event.pipeline_id, debounceMs: 1000 });
  return () => {
    stopWatching();
    stopTicking();
  };
}
