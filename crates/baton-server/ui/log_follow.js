// A task's output, read to its end and then followed as it arrives: the log endpoint's
// `follow=true` streams new bytes until the task is over, a newer attempt starts, or
// 30 s pass with nothing new (then we ask again from the bytes we have).

import { authorized, errorOf, get, withQuery } from './api.js';

/// Whether a task in this status will write no more output.
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed_out', 'expired']);

/// Reads attempt `attempt` of task `id` from the start, giving its text to `onText` as
/// it comes (split anywhere, a character never cut in two). Follows it while the task
/// runs it, and returns once it is over: `{ status, attempt }` of the task then, where a
/// higher `attempt` means a retry began. Stops early, quietly, when `signal` aborts.
export async function readLog(id, attempt, { onText, signal }) {
  const decoder = new TextDecoder('utf-8');
  const path = `/v1/tasks/${encodeURIComponent(id)}/logs`;
  let offset = 0;

  // The stored bytes from `offset`, one slice (up to 1 MiB) after another.
  async function readStored() {
    for (;;) {
      const response = await fetch(withQuery(path, { attempt, offset }), authorized({ signal }));
      if (!response.ok) throw await errorOf(response);
      const bytes = new Uint8Array(await response.arrayBuffer());
      if (bytes.length > 0) onText(decoder.decode(bytes, { stream: true }));
      const next = Number(response.headers.get('x-baton-next-offset'));
      if (bytes.length === 0 || !(next > offset)) return;
      offset = next;
    }
  }

  // New bytes as they arrive, until the server ends the stream.
  async function followStream() {
    const response = await fetch(
      withQuery(path, { attempt, offset, follow: true }),
      authorized({ signal, cache: 'no-store' }),
    );
    if (!response.ok) throw await errorOf(response);
    const reader = response.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      offset += value.length;
      onText(decoder.decode(value, { stream: true }));
    }
  }

  await readStored();
  for (;;) {
    const task = await get(`/v1/tasks/${encodeURIComponent(id)}`, { signal });
    if (TERMINAL.has(task.status) || task.attempt > attempt) {
      // What arrived between the last read and the end.
      await readStored();
      onText(decoder.decode());
      return { status: task.status, attempt: task.attempt };
    }
    const started = Date.now();
    const before = offset;
    await followStream();
    // A stream that ended at once with nothing (a node shutting down): not a busy loop.
    if (offset === before && Date.now() - started < 1000) await pause(1000, signal);
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
