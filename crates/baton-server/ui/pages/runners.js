// Runners: what each offers (labels, queues, slots), how busy it is, when it was last
// heard from and its version; pause, resume and delete for admin tokens. Below them, the
// runners started on demand: each provisioner's demand and the runners it is starting
// or running (docs/dynamic-runners.md).

import { del, get, post } from '../api.js';
import { actionButton, fill, h, shortId } from '../dom.js';
import { ago } from '../time.js';
import { watch } from '../watch.js';

export function mount(main, { access, toast }) {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });
  let runners = [];

  async function act(runner, action) {
    const path = `/v1/runners/${encodeURIComponent(runner.id)}`;
    try {
      if (action === 'delete') {
        if (!window.confirm(`Delete runner ${runner.name}? Its agent exits at its next request; its running tasks end as lost.`)) return;
        await del(path);
        toast(`Deleted runner ${runner.name}.`);
      } else {
        await post(`${path}/${action}`);
        toast(`${action === 'pause' ? 'Paused' : 'Resumed'} runner ${runner.name}.`);
      }
      await load();
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function row(r) {
    const state = r.paused ? 'paused' : r.online ? 'online' : 'offline';
    return h(
      'tr',
      { 'data-runner-id': r.id },
      h(
        'td',
        {},
        h('strong', {}, r.name),
        ' ',
        shortId(r.id),
        r.ephemeral ? h('span', { class: 'label ephemeral', title: `started on demand by ${r.provisioner}, for one task` }, 'on demand') : null,
      ),
      h('td', {}, h('span', { class: `state state-${state}` }, state)),
      h('td', {}, r.labels?.length ? r.labels.map((l) => h('span', { class: 'label' }, l)) : '—'),
      h('td', {}, r.queues?.length ? r.queues.join(', ') : 'any'),
      h('td', { class: 'slots', title: `${r.running} of ${r.capacity} slots busy` }, h('meter', { min: 0, max: r.capacity, value: r.running }), ` ${r.running}/${r.capacity}`),
      h('td', { title: r.last_seen || '' }, ago(r.last_seen)),
      h('td', {}, r.version),
      access.admin
        ? h(
            'td',
            {},
            h(
              'div',
              { class: 'row-actions' },
              r.paused
                ? actionButton('Resume', () => act(r, 'resume'), { 'data-action': 'resume' })
                : actionButton('Pause', () => act(r, 'pause'), { 'data-action': 'pause', class: 'secondary' }),
              actionButton('Delete', () => act(r, 'delete'), { 'data-action': 'delete', class: 'danger' }),
            ),
          )
        : null,
    );
  }

  const provisionersBody = h('tbody');
  const provisionersSection = h(
    'section',
    { hidden: true },
    h('h2', {}, 'On demand'),
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'list', id: 'provisioners' },
        h('thead', {}, h('tr', {}, ['Provisioner', 'Backend', 'Labels', 'Waiting', 'Demand', 'Starting', 'Running', 'Retrying', 'Capacity'].map((t) => h('th', {}, t)))),
        provisionersBody,
      ),
    ),
  );

  function provisionerRow(p) {
    const count = (state) => p.assignments.filter((a) => a.state === state).length;
    return h(
      'tr',
      { 'data-provisioner': p.name },
      h('td', {}, h('strong', {}, p.name)),
      h('td', {}, p.backend),
      h('td', {}, p.labels.map((l) => h('span', { class: 'label' }, l))),
      h('td', { title: 'tasks waiting that its runners could take' }, String(p.demand.waiting)),
      h('td', { title: 'of those, tasks no registered runner could take now' }, String(p.demand.demand)),
      h('td', {}, String(count('starting'))),
      h('td', {}, String(count('running'))),
      h('td', { title: p.assignments.filter((a) => a.error).map((a) => `${a.runner_name}: ${a.error}`).join('\n') }, String(count('retrying'))),
      h('td', {}, String(p.capacity)),
    );
  }

  async function loadProvisioners() {
    const { provisioners } = await get('/v1/provisioners');
    provisionersSection.hidden = provisioners.length === 0;
    fill(provisionersBody, provisioners.map(provisionerRow));
  }

  async function load() {
    loadProvisioners().catch(() => {});
    try {
      ({ runners } = await get('/v1/runners'));
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    fill(body, runners.length ? runners.map(row) : h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No runner has registered.')));
  }

  const headings = ['Runner', 'State', 'Labels', 'Queues', 'Slots busy', 'Last seen', 'Version'];
  if (access.admin) headings.push('');
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Runners')),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'runners' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body)),
    provisionersSection,
  );
  load().catch(() => {});
  // Joins, losses and changes come as events; how busy each is and when it was last
  // heard from do not, so the page also looks every few seconds.
  return watch({ kind: 'runner' }, { reload: load, alwaysPoll: true, pollMs: 5000 });
}
