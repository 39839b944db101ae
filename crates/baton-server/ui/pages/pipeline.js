// One pipeline (`GET /v1/pipelines/{id}`): its jobs drawn as a graph (pipeline_graph.js)
// and listed below it, each with what it needs and on which rule, its runs, its time,
// exit code and error; cancel the pipeline while it runs, re-run a job that failed,
// timed out, was cancelled or expired (the jobs it had skipped run again after it). The
// events of its jobs' tasks (`GET /v1/events?pipeline=`) move the boxes as they happen.

import { ApiError, get, post } from '../api.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { tickElapsed } from '../elapsed.js';
import { TERMINAL } from '../log_follow.js';
import { RELEASE_WORDS, drawGraph, jobTime } from '../pipeline_graph.js';
import { taskRef } from '../task_ref.js';
import { when } from '../time.js';
import { watch } from '../watch.js';
import { countBadges, pipelineTook } from './pipelines.js';

/// A job whose latest task ended so may be re-run. A skipped job is not: it runs again
/// when the job that made it skip is re-run.
const RERUNNABLE = new Set(['failed', 'timed_out', 'cancelled', 'expired']);

/// Why the pipeline the address names cannot be shown, in words; null for an error that
/// is not about the id (the network, the node).
function missing(asked, error) {
  const named = h('code', {}, asked);
  if (!error) return [h('p', {}, named, ' is not a pipeline id.'), h('p', { class: 'hint' }, 'A pipeline id is a UUID, as the Pipelines page links to it.')];
  if (error.status === 404) return [h('p', {}, 'No pipeline has the id ', named, ', or this token may not see it.')];
  if (error.status === 400 || error.status === 422) return [h('p', {}, 'This node does not take ', named, ' as a pipeline id.')];
  return null;
}

export function mount(main, { access, toast }, route) {
  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/pipelines' }, '← Pipelines'));
  const notice = (body) => main.append(crumbs, h('div', { class: 'notice', id: 'pipeline-missing', role: 'alert' }, h('h1', {}, 'No such pipeline'), ...body));
  const id = taskRef(route.id)?.id;
  if (!id) {
    // Nothing to ask the server: the address is wrong, not the network.
    notice(missing(route.id, null));
    return () => {};
  }
  const stopped = new AbortController();
  let pipeline = null;
  /// Each job task's latest step, as its events said: two nodes may tell one task's
  /// changes out of order, and the later state has the larger step.
  const steps = new Map();
  let stopWatching = () => {};

  const head = h('div', { class: 'page-head' });
  const buttons = h('div', { class: 'actions' });
  const details = h('dl', { class: 'details', id: 'pipeline-details' });
  const graph = h('div', { class: 'graph-wrap' });
  const legend = h(
    'p',
    { class: 'graph-legend hint' },
    'An arrow runs from a job to the job that needs it; the dependent runs ',
    h('span', { class: 'key-edge edge-on_success' }, 'when it succeeded'),
    h('span', { class: 'key-edge edge-on_failure' }, 'when one it needs did not'),
    h('span', { class: 'key-edge edge-always' }, 'whatever the end'),
  );
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });

  const field = (name, ...value) => [h('dt', {}, name), h('dd', { 'data-field': name.toLowerCase() }, ...value)];

  async function cancel() {
    const open = pipeline.jobs.filter((j) => !TERMINAL.has(j.status)).length;
    if (!window.confirm(`Cancel pipeline ${pipeline.name}? Its ${open} job(s) not ended are cancelled; running ones are stopped by their runners.`)) return;
    try {
      const answer = await post(`/v1/pipelines/${encodeURIComponent(id)}/cancel`);
      pipeline = answer.pipeline;
      render();
      toast(`Cancelled ${answer.cancelled} job(s)${answer.cancelling ? `; ${answer.cancelling} being stopped by their runners` : ''}.`);
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  async function retry(job) {
    try {
      pipeline = await post(`/v1/pipelines/${encodeURIComponent(id)}/jobs/${encodeURIComponent(job.name)}/retry`);
      render();
      toast(`Re-running job ${job.name}; the jobs it had skipped run again after it.`);
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function row(job) {
    const time = jobTime(job);
    return h(
      'tr',
      { 'data-job': job.name, 'data-status': job.status },
      h('td', {}, h('a', { href: `#/tasks/${job.task_id}`, title: `Task ${job.task_id}` }, h('strong', {}, job.name))),
      h('td', { class: 'needs' }, job.needs.length ? [job.needs.join(', '), h('div', { class: 'hint' }, `runs ${RELEASE_WORDS[job.when] || job.when}`)] : '—'),
      h('td', { class: 'status-cell' }, statusBadge(job.status)),
      h('td', { class: 'runs' }, String(job.runs)),
      h('td', { class: 'took' }, time.since ? h('span', { 'data-running-since': time.since }, time.text) : time.text || '—'),
      h('td', { class: 'exit-code' }, job.exit_code ?? '—'),
      // A skip is the rule at work, not a fault: its reason is said in the muted colour.
      h('td', { class: `job-error ${job.status === 'skipped' ? 'hint' : 'error-text'}` }, job.error || ''),
      access.changeTasks
        ? h('td', {}, RERUNNABLE.has(job.status) ? actionButton('Re-run', () => retry(job), { 'data-action': 'retry', class: 'secondary', title: `Re-run ${job.name} and the jobs it skipped` }) : null)
        : null,
    );
  }

  function render() {
    const p = pipeline;
    const counts = {};
    for (const job of p.jobs) counts[job.status] = (counts[job.status] || 0) + 1;
    fill(head, h('h1', {}, 'Pipeline ', h('span', { id: 'pipeline-name' }, p.name), ' ', shortId(p.id)), h('span', { id: 'pipeline-status' }, statusBadge(p.status)));
    fill(buttons, access.changeTasks && p.status === 'running' ? actionButton('Cancel pipeline', cancel, { id: 'cancel-pipeline', class: 'danger' }) : null);
    fill(
      details,
      field('Id', h('code', {}, p.id)),
      field('Jobs', `${p.jobs.length} `, countBadges(counts)),
      field('Created', when(p.created_at)),
      field('Finished', when(p.finished_at)),
      field('Took', pipelineTook(p)),
      p.schedule_id ? field('Schedule', h('a', { href: `#/tasks?schedule=${p.schedule_id}` }, shortId(p.schedule_id))) : null,
    );
    fill(graph, drawGraph(p.jobs));
    fill(body, p.jobs.map(row));
  }

  async function load() {
    try {
      pipeline = await get(`/v1/pipelines/${encodeURIComponent(id)}`, { signal: stopped.signal });
      error.hidden = true;
    } catch (e) {
      if (stopped.signal.aborted) return;
      error.textContent = `Could not read the pipeline again: ${e.message}`;
      error.hidden = false;
      throw e;
    }
    render();
  }

  /// A job's task changed: its box and row change at once; the timings come with the
  /// read that follows. A task the page does not show yet (a re-run's) is read then too.
  function onEvent(event) {
    if (event.kind !== 'task' || !pipeline) return false;
    const known = steps.get(event.task_id);
    if (known !== undefined && event.step <= known) return true;
    steps.set(event.task_id, event.step);
    const job = pipeline.jobs.find((j) => j.task_id === event.task_id);
    if (job) {
      job.status = event.status;
      render();
    }
    return false;
  }

  /// The first read: a pipeline that is not there gets a message, and nothing is followed.
  async function open() {
    try {
      pipeline = await get(`/v1/pipelines/${encodeURIComponent(id)}`, { signal: stopped.signal });
    } catch (e) {
      if (stopped.signal.aborted) return;
      const why = e instanceof ApiError ? missing(route.id, e) : null;
      if (why) {
        main.replaceChildren();
        notice(why);
        return;
      }
      error.replaceChildren(`Could not read the pipeline: ${e.message} `, actionButton('Try again', open, { class: 'secondary' }));
      error.hidden = false;
      return;
    }
    error.hidden = true;
    render();
    stopWatching = watch({ kind: 'task', pipeline: id }, { reload: load, onEvent, debounceMs: 250, pollMs: 2000 });
  }

  const headings = ['Job', 'Needs', 'Status', 'Runs', 'Took', 'Exit code', 'Error'];
  if (access.changeTasks) headings.push('');
  main.append(
    crumbs,
    head,
    buttons,
    error,
    details,
    h('h2', {}, 'Graph'),
    graph,
    legend,
    h('h2', {}, 'Jobs'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'pipeline-jobs' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body)),
  );
  open();
  const stopTicking = tickElapsed(main);
  return () => {
    stopped.abort();
    stopWatching();
    stopTicking();
  };
}
