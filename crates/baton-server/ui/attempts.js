// A task's history, attempt by attempt (`GET /v1/tasks/{id}/attempts`): where each ran,
// when it started and ended, how long it took (counting while it runs), its exit code,
// its error and how it ended — a row each, as River shows each attempt's error and
// Temporal a workflow's history — with a bar on a shared time line and its log a click
// away.

import { ApiError, get } from './api.js';
import { fill, h, shortId, statusBadge } from './dom.js';
import { span, when } from './time.js';

const SVG = 'http://www.w3.org/2000/svg';
/// The time line's size, in the SVG's own units (it scales with its cell).
const LINE_WIDTH = 160;
const LINE_HEIGHT = 10;

function svg(tag, attrs = {}) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

export class AttemptHistory {
  /// `showLog(n)`: what a row's Log button does.
  constructor({ id, showLog }) {
    this.id = id;
    this.showLog = showLog;
    this.absent = false;
    this.attempts = [];
    this.shown = null;
    this.body = h('tbody');
    this.element = h(
      'section',
      { class: 'history', hidden: true },
      h('h2', {}, 'Attempts'),
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'list', id: 'attempt-history' },
          h('thead', {}, h('tr', {}, ['#', 'Runner', 'Started', 'Ended', 'Took', 'Time line', 'Exit code', 'Ended as', 'Error', ''].map((t) => h('th', {}, t)))),
          this.body,
        ),
      ),
    );
  }

  /// Reads the history again; a node without the endpoint leaves the section hidden.
  async load(signal) {
    if (this.absent) return;
    try {
      const { attempts } = await get(`/v1/tasks/${encodeURIComponent(this.id)}/attempts`, { signal });
      this.attempts = attempts || [];
    } catch (e) {
      if (e instanceof ApiError && (e.status === 404 || e.status === 405) && !this.attempts.length) {
        this.absent = true;
        return;
      }
      throw e;
    }
    this.render();
  }

  /// Marks the row whose log is shown.
  setShown(n) {
    this.shown = n;
    for (const row of this.body.querySelectorAll('tr[data-attempt]')) row.classList.toggle('shown', Number(row.dataset.attempt) === n);
  }

  render() {
    this.element.hidden = this.attempts.length === 0;
    const starts = this.attempts.map((a) => Date.parse(a.started_at || a.leased_at || '')).filter(Number.isFinite);
    const first = starts.length ? Math.min(...starts) : null;
    const ends = this.attempts.map((a) => (a.ended_at ? Date.parse(a.ended_at) : Date.now())).filter(Number.isFinite);
    const last = ends.length ? Math.max(...ends, first ?? 0) : null;
    fill(this.body, this.attempts.map((a) => this.row(a, first, last)));
    this.setShown(this.shown);
  }

  row(a, first, last) {
    const running = a.started_at && !a.ended_at;
    const outcome = a.ended_as || (running ? 'running' : a.started_at ? '' : 'leased');
    return h(
      'tr',
      { 'data-attempt': a.attempt, 'data-ended-as': a.ended_as || '' },
      h('td', {}, String(a.attempt)),
      h('td', {}, a.runner_name ? h('span', { title: a.runner_id || '' }, a.runner_name) : a.runner_id ? shortId(a.runner_id) : '—'),
      h('td', { title: a.started_at || '' }, when(a.started_at)),
      h('td', { title: a.ended_at || '' }, when(a.ended_at)),
      h(
        'td',
        { class: 'took' },
        running ? h('span', { 'data-running-since': a.started_at, class: 'elapsed' }, span(Date.now() - Date.parse(a.started_at))) : a.duration_ms != null ? span(a.duration_ms) : '—',
      ),
      h('td', { class: 'timeline' }, this.bar(a, first, last)),
      h('td', { class: 'exit-code' }, a.exit_code ?? '—'),
      h('td', {}, outcome ? statusBadge(outcome) : '—', a.retried ? h('span', { class: 'hint' }, ' then retried') : null),
      h('td', { class: 'error-text attempt-error' }, a.error || ''),
      h('td', {}, h('button', { type: 'button', class: 'secondary', 'data-log': a.attempt, onclick: () => this.showLog(a.attempt) }, 'Log')),
    );
  }

  /// The attempt's run on a line shared by all of them, first start to last end.
  bar(a, first, last) {
    const start = Date.parse(a.started_at || '');
    if (!Number.isFinite(start) || first === null || !(last > first)) return '—';
    const end = a.ended_at ? Date.parse(a.ended_at) : Date.now();
    const x = ((start - first) / (last - first)) * LINE_WIDTH;
    const width = Math.max(2, ((end - start) / (last - first)) * LINE_WIDTH);
    const picture = svg('svg', { viewBox: `0 0 ${LINE_WIDTH} ${LINE_HEIGHT}`, class: 'bar', role: 'img', 'aria-label': `from ${when(a.started_at)} to ${a.ended_at ? when(a.ended_at) : 'now'}` });
    picture.appendChild(svg('rect', { x: 0, y: LINE_HEIGHT / 2 - 0.5, width: LINE_WIDTH, height: 1, class: 'axis' }));
    picture.appendChild(svg('rect', { x: Math.min(x, LINE_WIDTH - 2), y: 1, width: Math.min(width, LINE_WIDTH - x), height: LINE_HEIGHT - 2, rx: 2, class: `run run-${a.ended_as || 'running'}` }));
    return picture;
  }
}
