// Nodes: each live node's address, start and the claims it holds. A node that dies is
// kept on the page, shown dying, and then with the node that adopted its claims — so an
// operator sees a failover happen, not a row silently vanish.

import { get } from '../api.js';
import { fill, h } from '../dom.js';
import { ago, span, when } from '../time.js';
import { watch } from '../watch.js';

export function mount(main) {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });
  /// Every node seen while the page is open: id → { view, state, lostAt, adoptedBy }.
  const seen = new Map();

  function row([id, node]) {
    const { view, state } = node;
    let stateText = 'live';
    if (state === 'lost') stateText = `lost ${ago(node.lostAt)}: its claims are being adopted`;
    if (state === 'adopted') stateText = `lost ${ago(node.lostAt)}: claims adopted by ${node.adoptedBy}`;
    if (state === 'left') stateText = `left ${ago(node.lostAt)} (drained)`;
    return h(
      'tr',
      { 'data-node-id': id, 'data-state': state, class: state === 'live' ? '' : 'dying' },
      h('td', {}, h('strong', {}, id)),
      h('td', {}, h('span', { class: `state state-${state}` }, stateText)),
      h('td', {}, view ? view.addr : '—'),
      // A lost node's last count, struck out: those claims are moving to the adopter.
      h('td', { class: 'claims' }, state === 'live' ? String(view.claims) : h('del', { title: 'held when last seen' }, String(view?.claims ?? 0))),
      h('td', { title: view ? when(view.started_at) : '' }, view ? `${when(view.started_at)} (up ${span(Date.now() - Date.parse(view.started_at))})` : '—'),
    );
  }

  function render() {
    const nodes = [...seen.entries()].sort(([a], [b]) => a.localeCompare(b));
    fill(body, nodes.length ? nodes.map(row) : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No live node.')));
  }

  function markLost(id, adoptedBy, at, state = 'lost') {
    const node = seen.get(id) || { view: null };
    if (node.state !== 'adopted') {
      node.state = adoptedBy ? 'adopted' : state;
      node.adoptedBy = adoptedBy || null;
    }
    node.lostAt = node.lostAt || at || new Date().toISOString();
    seen.set(id, node);
  }

  async function load() {
    let nodes;
    try {
      ({ nodes } = await get('/v1/nodes'));
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    const live = new Set(nodes.map((n) => n.id));
    for (const view of nodes) {
      // A node that comes back under the same id is live again.
      seen.set(view.id, { view, state: 'live' });
    }
    // Gone from the list: its liveness key expired, or it left.
    for (const [id, node] of seen) if (!live.has(id) && node.state === 'live') markLost(id, null);
    render();
  }

  /// A node event: `lost` names the node that adopted the claims (`adopted_by`) once
  /// one has; `left` is a drained node, which hands its claims over itself.
  function onEvent(event) {
    if (event.kind !== 'node') return false;
    if (event.event === 'lost' || event.event === 'adopted') markLost(event.node_id, event.adopted_by, event.at);
    if (event.event === 'left') markLost(event.node_id, null, event.at, 'left');
    render();
    // Claims moved, or a node joined: read the counts again.
    return false;
  }

  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Nodes')),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'nodes' }, h('thead', {}, h('tr', {}, ['Node', 'Liveness', 'Address', 'Claims held', 'Started'].map((t) => h('th', {}, t)))), body)),
  );
  load().catch(() => {});
  // Claims move without an event of their own: look every two seconds too.
  return watch({ kind: 'node' }, { reload: load, onEvent, alwaysPoll: true, pollMs: 2000, debounceMs: 200 });
}
