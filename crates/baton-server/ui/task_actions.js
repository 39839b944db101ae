// Cancelling and re-running tasks from the pages: one task, a selection (the single
// endpoints, a few at a time, each answered on its own), or every task a filter takes
// (the bulk endpoints, which take a filter and not a list of ids).

import { post } from './api.js';

/// Ended tasks, which a re-run may take; the others may be cancelled.
export const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped']);

const path = (id, action) => `/v1/tasks/${encodeURIComponent(id)}/${action}`;

export const cancelTask = (id) => post(path(id, 'cancel'));
export const retryTask = (id) => post(path(id, 'retry'));

/// Runs `action` ('cancel' or 'retry') on each id, four at a time; returns what was
/// done and what was refused, with the server's reasons.
export async function actOnEach(ids, action) {
  const queue = [...ids];
  const done = [];
  const refused = [];
  async function worker() {
    while (queue.length) {
      const id = queue.shift();
      try {
        done.push(await post(path(id, action)));
      } catch (e) {
        refused.push({ id, message: e.message });
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(4, queue.length) }, worker));
  return { done, refused };
}

/// A sentence on the outcome of `actOnEach`.
export function summary(action, { done, refused }) {
  const verb = action === 'cancel' ? 'Cancelled' : 'Re-ran';
  let text = `${verb} ${done.length} task${done.length === 1 ? '' : 's'}.`;
  if (refused.length) {
    const reasons = [...new Set(refused.map((r) => r.message))].slice(0, 2).join('; ');
    text += ` ${refused.length} refused: ${reasons}`;
  }
  return text;
}

/// The bulk endpoint's body for a list filter, or null when the list's filter has a
/// part the bulk endpoints cannot take (label, text): acting on "all matching" would
/// then take more tasks than the list shows. (`order` changes no task the filter takes.)
export function bulkFilter(filter) {
  if (filter.label || filter.text) return null;
  const body = {};
  if (filter.queue) body.queue = filter.queue;
  if (filter.status) body.status = filter.status;
  if (filter.schedule) body.schedule_id = filter.schedule;
  if (filter.created_after) body.created_after = filter.created_after;
  if (filter.created_before) body.created_before = filter.created_before;
  return Object.keys(body).length ? body : null;
}

/// `POST /v1/tasks/{cancel,retry}` with `filter`: a dry run when `dryRun`.
export const bulk = (action, filter, dryRun) => post(`/v1/tasks/${action}`, { ...filter, dry_run: dryRun });
