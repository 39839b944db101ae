// One task: what it runs, where and when, each attempt's history, its outputs, its log
// (attempts.js, log_panel.js), cancel and re-run, links to its trace and to the pipeline
// it is a job of. The address may name it by its short id: the page then shows the
// whole one.

import { ApiError, get } from '../api.js';
import { AttemptHistory } from '../attempts.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { tickElapsed } from '../elapsed.js';
import { TERMINAL } from '../log_follow.js';
import { LogPanel } from '../log_panel.js';
import { between, when } from '../time.js';
import { watch } from '../watch.js';
import { cancelTask, retryTask } from '../task_actions.js';
import { taskRef } from '../task_ref.js';
import { commandLine } from './tasks.js';
import { RELEASE_WORDS } from '../pipeline_graph.js';
import { traceLink } from '../trace.js';

const WHOLE_ID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;

/// Why the task the address names cannot be shown, in words (not the server's).
function missing(asked, error) {
  const named = h('code', {}, asked);
  if (!error) {
    return [
      h('p', {}, named, ' is not a task id.'),
      h('p', { class: 'hint' }, 'A task id is a UUID, such as 0192f6e4-7c1a-7d3e-9b2f-5a6c8d0e1f23, or its last 12 characters (5a6c8d0e1f23), as the tables show it.'),
    ];
  }
  if (error.status === 404) return [h('p', {}, 'No task has the id ', named, ', or this token may not see it.')];
  if (error.status === 409) {
    // The server names the tasks the short id matches: offer each.
    const ids = [...new Set(error.message.match(WHOLE_ID) || [])];
    return [
      h('p', {}, 'The short id ', named, ' matches more than one task: open one by its whole id.'),
      ids.length ? h('ul', { class: 'matches' }, ids.map((id) => h('li', {}, h('a', { href: `#/tasks/${id}` }, id)))) : null,
    ];
  }
  if (error.status === 400 || error.status === 422) {
    return [h('p', {}, 'This node does not take ', named, ' as a task id: open the task by its whole id.')];
  }
  return null;
}

export function mount(main, { access, config, toast }, route) {
  const ref = taskRef(route.id);
  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, '← Tasks'));
  const notice = (...body) => main.append(crumbs, h('div', { class: 'notice', id: 'task-missing', role: 'alert' }, h('h1', {}, 'No such task'), ...body));
  if (!ref) {
    // Nothing to ask the server: the address is wrong, not the network.
    notice(missing(route.id, null));
    return () => {};
  }
  /// The whole id, once known (the address may give the short one).
  let id = ref.id || null;
  const stopped = new AbortController();
  let task = null;
  /// The node that made the task's latest change, as its event said: the REST view of a
  /// task does not say which node holds it.
  let node = null;
  let lastStep = null;
  let logs = null;
  let attempts = null;
  let stopWatching = () => {};

  const head = h('div', { class: 'page-head' });
  const buttons = h('div', { class: 'actions' });
  const details = h('dl', { class: 'details', id: 'task-details' });
  const outputs = h('div', { class: 'outputs' });
  const later = h('div');
  const error = h('p', { class: 'error', hidden: true });

  function field(name, ...value) {
    return [h('dt', {}, name), h('dd', { 'data-field': name.toLowerCase().replaceAll(' ', '-') }, ...value)];
  }
  const link = (target, text) => (target ? h('a', { href: target }, text) : '—');

  function renderHead() {
    const trace = traceLink(config.trace_url, task.traceparent);
    fill(
      head,
      h('h1', {}, 'Task ', shortId(task.id)),
      statusBadge(task.status),
      trace ? h('a', { class: 'trace', href: trace, target: '_blank', rel: 'noopener noreferrer', id: 'trace-link' }, 'Trace ↗') : null,
    );
    fill(buttons);
    if (!access.changeTasks) return;
    if (!TERMINAL.has(task.status) && task.status !== 'cancelling') {
      buttons.append(actionButton('Cancel', () => act('cancel'), { id: 'cancel', class: 'danger' }));
    }
    if (TERMINAL.has(task.status) && !task.retried_by) {
      buttons.append(actionButton('Re-run', () => act('retry'), { id: 'retry' }));
    }
  }

  async function act(action) {
    try {
      const answer = await (action === 'cancel' ? cancelTask(id) : retryTask(id));
      if (action === 'retry') {
        toast(`Re-run as task ${answer.id}.`);
        location.hash = `#/tasks/${answer.id}`;
      } else {
        toast(answer.status === 'cancelling' ? 'Cancelling: its runner is stopping it.' : 'Cancelled.');
        await load();
      }
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function renderDetails() {
    const t = task;
    const running = t.started_at && !t.finished_at && !TERMINAL.has(t.status);
    fill(
      details,
      field('Id', h('code', { class: 'whole-id' }, t.id)),
      t.pipeline_id
        ? field('Pipeline', h('a', { href: `#/pipelines/${t.pipeline_id}`, id: 'pipeline-link' }, shortId(t.pipeline_id)), ', job ', h('code', { class: 'job-name' }, t.job ?? '—'))
        : null,
      // A task that waits for others (a job's needs, or `depends_on`): on which of their ends it runs.
      t.when ? field('Runs', RELEASE_WORDS[t.when] || t.when) : null,
      field('Queue', h('a', { href: `#/tasks?queue=${encodeURIComponent(t.queue)}` }, t.queue)),
      field('Labels', t.labels?.length ? t.labels.map((l) => h('span', { class: 'label' }, l)) : '—'),
      field(t.command ? 'Command' : 'Script', h('code', { class: 'command' }, t.command ? commandLine(t) : t.script)),
      field('Attempt', `${t.attempt} of ${t.max_attempts}`),
      field('Runner', t.runner_id ? h('a', { href: '#/runners' }, shortId(t.runner_id)) : '—'),
      field('Node', t.node_id
        ? h('span', { title: 'The node holding its claim: the one that reconciles it' }, t.node_id)
        : node ? h('span', { title: 'The node that made its latest change, as the event stream said' }, node) : '—'),
      field('Exit code', t.exit_code ?? '—'),
      t.error ? field('Error', h('span', { class: 'error-text' }, t.error)) : null,
      field('Created', when(t.created_at)),
      field('Queued', when(t.queued_at)),
      field('Leased', when(t.leased_at)),
      field('Started', when(t.started_at), t.started_at ? ` (waited ${between(t.created_at, t.started_at)})` : ''),
      running
        ? field('Running for', h('span', { 'data-running-since': t.started_at, id: 'running-for' }, between(t.started_at, new Date().toISOString())))
        : field('Finished', when(t.finished_at), t.finished_at ? ` (ran ${between(t.started_at, t.finished_at)})` : ''),
      field('Timeout', `${t.timeout_s}s`),
      field('Priority', t.priority),
      t.schedule_id ? field('Schedule', link(`#/tasks?schedule=${t.schedule_id}`, shortId(t.schedule_id))) : null,
      t.retry_of ? field('Re-run of', link(`#/tasks/${t.retry_of}`, shortId(t.retry_of))) : null,
      t.retried_by ? field('Re-run as', link(`#/tasks/${t.retried_by}`, shortId(t.retried_by))) : null,
      // Names only: values may be long, and a reader need not see them to find a task.
      Object.keys(t.env || {}).length ? field('Environment', Object.keys(t.env).join(', ')) : null,
      t.secret_env_keys?.length ? field('Secrets', t.secret_env_keys.join(', ')) : null,
    );
    fill(
      outputs,
      t.outputs ? [h('h2', {}, 'Outputs'), h('pre', { class: 'json', id: 'outputs' }, JSON.stringify(t.outputs, null, 2))] : null,
      t.payload ? [h('h2', {}, 'Payload'), h('pre', { class: 'json' }, JSON.stringify(t.payload, null, 2))] : null,
    );
  }

  /// The first read, which finds the task (the address may name it by its short id): a
  /// task that is not there gets a message, and nothing is followed.
  async function open() {
    try {
      task = await get(`/v1/tasks/${encodeURIComponent(id || ref.short)}`, { signal: stopped.signal });
    } catch (e) {
      if (stopped.signal.aborted) return;
      const why = e instanceof ApiError ? missing(route.id, e) : null;
      if (why) {
        main.replaceChildren();
        notice(why);
        return;
      }
      error.replaceChildren(`Could not read the task: ${e.message} `, actionButton('Try again', open, { class: 'secondary' }));
      error.hidden = false;
      return;
    }
    error.hidden = true;
    if (id !== task.id) {
      // A short id in the address: the whole one replaces it, so the address names this
      // task for good (a later task could share the short id).
      id = task.id;
      const query = route.query.toString();
      history.replaceState(null, '', `#/tasks/${id}${query ? `?${query}` : ''}`);
    }
    attempts = new AttemptHistory({ id, showLog: (n) => logs.show(n) });
    logs = new LogPanel({
      id,
      attempt: route.query.get('attempt'),
      line: Number(route.query.get('line')) || null,
      signal: stopped.signal,
      onShow: (n) => attempts.setShown(n),
    });
    later.append(attempts.element, outputs, logs.element);
    render();
    attempts.load(stopped.signal).catch(() => {});
    stopWatching = watch({ kind: 'task', task: id }, { reload: load, onEvent, debounceMs: 250 });
  }

  function render() {
    renderHead();
    renderDetails();
    logs.setTask(task);
  }

  async function load() {
    try {
      task = await get(`/v1/tasks/${encodeURIComponent(id)}`, { signal: stopped.signal });
      error.hidden = true;
    } catch (e) {
      if (stopped.signal.aborted) return;
      error.textContent = `Could not read the task again: ${e.message}`;
      error.hidden = false;
      throw e;
    }
    render();
    await attempts.load(stopped.signal);
  }

  function onEvent(event) {
    if (event.kind !== 'task' || event.task_id !== id) return true;
    // Two nodes changing the task at once may tell it out of order: the later state has
    // the larger step.
    if (lastStep !== null && event.step <= lastStep) return false;
    lastStep = event.step;
    if (event.node_id) node = event.node_id;
    if (task) {
      task.status = event.status;
      renderHead();
    }
    // The rest (timings, exit code, runner) from the API.
    return false;
  }

  main.append(crumbs, head, buttons, error, details, later);
  open();
  const stopTicking = tickElapsed(main);
  return () => {
    stopped.abort();
    stopWatching();
    stopTicking();
    logs?.stop();
  };
}
