// Queues: how many tasks wait and run in each, how long the oldest has waited, whether
// it is paused ("active" when not: the word the CLI uses too), and its last hour — tasks
// finished and failed, and charts of throughput, failures and depth minute by minute
// (`GET /v1/queues/trends`); pause and resume for admin tokens.

import { ApiError, get, post } from '../api.js';
import { actionButton, fill, h } from '../dom.js';
import { ago } from '../time.js';
import { depthChart, throughputChart, totals } from '../trend_chart.js';
import { watch } from '../watch.js';

/// The trends are read again this often (and with the list, at most this often).
const TRENDS_EVERY_MS = 15000;
const TREND_MINUTES = 60;

export function mount(main, { access, toast }) {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });
  const charts = h('div', { class: 'charts', id: 'queue-trends' });
  const trendsSection = h('section', { class: 'trends', hidden: true }, h('h2', {}, 'The last hour'), charts);
  let queues = [];
  /// queue name → its trend (`{ queue, points }`); null until read, or when the node
  /// has no trends.
  let trends = null;
  let trendsAbsent = false;
  let trendsReadAt = 0;

  async function act(queue, action) {
    try {
      await post(`/v1/queues/${encodeURIComponent(queue.name)}/${action}`);
      toast(`${action === 'pause' ? 'Paused' : 'Resumed'} queue ${queue.name}.`);
      await load();
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function row(q) {
    const trend = trends?.get(q.name);
    const sum = trend ? totals(trend.points) : null;
    return h(
      'tr',
      { 'data-queue': q.name },
      h('td', {}, h('a', { href: `#/tasks?queue=${encodeURIComponent(q.name)}` }, q.name)),
      h('td', {}, h('span', { class: `state state-${q.paused ? 'paused' : 'online'}` }, q.paused ? `paused ${ago(q.paused_at)}` : 'active')),
      h('td', { class: 'depth' }, String(q.depth)),
      h('td', { class: 'running' }, String(q.running)),
      h('td', { title: q.oldest_waiting || '' }, q.oldest_waiting ? ago(q.oldest_waiting).replace(' ago', '') : '—'),
      h('td', { class: 'succeeded-hour' }, sum ? String(sum.succeeded) : '—'),
      h('td', { class: 'failed-hour' }, sum ? h('span', { class: sum.failed ? 'error-text' : '' }, String(sum.failed)) : '—'),
      access.admin
        ? h(
            'td',
            {},
            h(
              'div',
              { class: 'row-actions' },
              q.paused
                ? actionButton('Resume', () => act(q, 'resume'), { 'data-action': 'resume' })
                : actionButton('Pause', () => act(q, 'pause'), { 'data-action': 'pause', class: 'secondary' }),
            ),
          )
        : null,
    );
  }

  function chart(trend) {
    const sum = totals(trend.points);
    return h(
      'figure',
      { class: 'chart-card', 'data-queue': trend.queue },
      h(
        'figcaption',
        {},
        h('strong', {}, trend.queue),
        ' ',
        h('span', { class: 'hint' }, `${sum.submitted} submitted, ${sum.succeeded} succeeded, `),
        h('span', { class: sum.failed ? 'error-text' : 'hint' }, `${sum.failed} failed`),
        h('span', { class: 'hint' }, `, ${sum.cancelled} cancelled`),
      ),
      h('div', { class: 'chart-title' }, 'Finished each minute ', h('span', { class: 'key succeeded' }, 'succeeded'), h('span', { class: 'key failed' }, 'failed'), h('span', { class: 'key cancelled' }, 'cancelled'), h('span', { class: 'key submitted' }, 'submitted')),
      throughputChart(trend.points),
      h('div', { class: 'chart-title' }, 'Waiting'),
      depthChart(trend.points),
      h('div', { class: 'chart-axis' }, h('span', {}, `${TREND_MINUTES} min ago`), h('span', {}, 'now')),
    );
  }

  function render() {
    fill(body, queues.length ? queues.map(row) : h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No queue has tasks, recent history or settings.')));
    if (trends) {
      trendsSection.hidden = trends.size === 0;
      fill(charts, [...trends.values()].sort((a, b) => a.queue.localeCompare(b.queue)).map(chart));
    }
  }

  async function loadTrends() {
    if (trendsAbsent) return;
    try {
      const answer = await get('/v1/queues/trends', { query: { minutes: TREND_MINUTES } });
      trends = new Map((answer.queues || []).map((q) => [q.queue, q]));
      trendsReadAt = Date.now();
    } catch (e) {
      // A node without trends: the page shows what it has.
      if (e instanceof ApiError && (e.status === 404 || e.status === 405)) trendsAbsent = true;
    }
  }

  async function load() {
    const trendsRead = Date.now() - trendsReadAt >= TRENDS_EVERY_MS ? loadTrends() : null;
    try {
      ({ queues } = await get('/v1/queues'));
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    await trendsRead;
    render();
  }

  const headings = ['Queue', 'State', 'Waiting', 'Running', 'Oldest waiting', 'Succeeded (1h)', 'Failed (1h)'];
  if (access.admin) headings.push('');
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Queues')),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'queues' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body)),
    trendsSection,
  );
  load().catch(() => {});
  // The charts move each minute whether or not an event comes.
  const poller = setInterval(() => {
    loadTrends().then(render);
  }, TRENDS_EVERY_MS);
  // Every task event may change a depth: a burst of them makes one read a second.
  const stopWatching = watch({ kind: 'task' }, { reload: load, debounceMs: 1000 });
  return () => {
    clearInterval(poller);
    stopWatching();
  };
}
