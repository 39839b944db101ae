// Queues: how many tasks wait and run in each, how long the oldest has waited, whether
// it is paused; pause and resume for admin tokens.

import { get, post } from '../api.js';
import { actionButton, fill, h } from '../dom.js';
import { ago } from '../time.js';
import { watch } from '../watch.js';

export function mount(main, { access, toast }) {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });

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
    return h(
      'tr',
      { 'data-queue': q.name },
      h('td', {}, h('a', { href: `#/tasks?queue=${encodeURIComponent(q.name)}` }, q.name)),
      h('td', {}, h('span', { class: `state state-${q.paused ? 'paused' : 'online'}` }, q.paused ? `paused ${ago(q.paused_at)}` : 'active')),
      h('td', { class: 'depth' }, String(q.depth)),
      h('td', { class: 'running' }, String(q.running)),
      h('td', { title: q.oldest_waiting || '' }, q.oldest_waiting ? ago(q.oldest_waiting).replace(' ago', '') : '—'),
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

  async function load() {
    let queues;
    try {
      ({ queues } = await get('/v1/queues'));
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    fill(body, queues.length ? queues.map(row) : h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No queue has tasks or settings.')));
  }

  const headings = ['Queue', 'State', 'Waiting', 'Running', 'Oldest waiting'];
  if (access.admin) headings.push('');
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Queues')),
    error,
    h('table', { class: 'list', id: 'queues' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body),
  );
  load().catch(() => {});
  // Every task event may change a depth: a burst of them makes one read a second.
  return watch({ kind: 'task' }, { reload: load, debounceMs: 1000 });
}
