// One task: what it runs, where and when, its attempts and outputs, its log following
// live with its colours, cancel and re-run, and a link to its trace.

import { get } from '../api.js';
import { AnsiRenderer } from '../ansi.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { TERMINAL, readLog } from '../log_follow.js';
import { between, when } from '../time.js';
import { watch } from '../watch.js';
import { cancelTask, retryTask } from '../task_actions.js';
import { commandLine } from './tasks.js';
import { traceLink } from '../trace.js';

export function mount(main, { access, config, toast }, route) {
  const id = route.id;
  const stopped = new AbortController();
  let task = null;
  /// The node that made the task's latest change, as its event said: the REST view of a
  /// task does not say which node holds it.
  let node = null;
  let lastStep = null;
  let shownAttempt = null;
  let logRun = null;

  const head = h('div', { class: 'page-head' });
  const buttons = h('div', { class: 'actions' });
  const details = h('dl', { class: 'details', id: 'task-details' });
  const outputs = h('div', { class: 'outputs' });
  const attempts = h('div', { class: 'attempts', id: 'attempts' });
  const log = h('pre', { class: 'log', id: 'log', tabindex: 0 });
  const logState = h('span', { class: 'log-state', id: 'log-state' });
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
    fill(
      details,
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
      field('Finished', when(t.finished_at), t.finished_at ? ` (ran ${between(t.started_at, t.finished_at)})` : ''),
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

  /// The attempts to choose from; the log shows one at a time (the latest by default).
  function renderAttempts() {
    const latest = Math.max(task.attempt, 1);
    fill(
      attempts,
      'Attempt ',
      Array.from({ length: latest }, (_, i) => i + 1).map((n) =>
        h('button', { type: 'button', class: n === shownAttempt ? 'current' : 'secondary', onclick: () => showLog(n) }, String(n)),
      ),
    );
  }

  /// Shows attempt `n`'s log from its start, following it while it runs.
  function showLog(n) {
    if (logRun) logRun.abort();
    logRun = new AbortController();
    const run = logRun;
    shownAttempt = n;
    renderAttempts();
    log.replaceChildren();
    const ansi = new AnsiRenderer();
    fill(logState, 'reading…');
    const signal = AbortSignal.any([stopped.signal, run.signal]);
    readLog(id, n, {
      signal,
      onText: (text) => {
        // Keep the view at the end while the user has not scrolled up.
        const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
        log.insertAdjacentHTML('beforeend', ansi.push(text));
        if (atEnd) log.scrollTop = log.scrollHeight;
        fill(logState, TERMINAL.has(task?.status) ? '' : 'following…');
      },
    })
      .then(({ attempt }) => {
        if (run.signal.aborted) return;
        fill(logState, attempt > n ? `attempt ${n} ended` : 'end of log');
        // A retry began while we followed this attempt: follow the new one.
        if (attempt > n && shownAttempt === n) showLog(attempt);
      })
      .catch((e) => {
        if (!signal.aborted) fill(logState, `log: ${e.message}`);
      });
  }

  async function load() {
    try {
      task = await get(`/v1/tasks/${encodeURIComponent(id)}`, { signal: stopped.signal });
      error.hidden = true;
    } catch (e) {
      if (stopped.signal.aborted) return;
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    renderHead();
    renderDetails();
    if (shownAttempt === null) showLog(Math.max(task.attempt, 1));
    else renderAttempts();
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

  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/tasks' }, '← Tasks')),
    head,
    buttons,
    error,
    details,
    outputs,
    h('div', { class: 'log-head' }, h('h2', {}, 'Log'), attempts, logState),
    log,
  );
  load().catch(() => {});
  const stopWatching = watch({ kind: 'task', task: id }, { reload: load, onEvent, debounceMs: 250 });
  return () => {
    stopped.abort();
    stopWatching();
  };
}
