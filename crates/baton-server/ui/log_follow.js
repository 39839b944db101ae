// A task's output, read to its end and then followed as it arrives: the log endpoint's
// `follow=true` streams new bytes until the task is over, a newer attempt starts, or
// 30 s pass with nothing new (then we ask again from the bytes we have).

import { authorized, errorOf, get, withQuery } from './api.js';

/// Whether a task in this status will write no more output (a `skipped` job never
/// wrote any).
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped']);

const logPath = (id) => `/v1/tasks/${encodeURIComponent(id)}/logs`;

/// The stored bytes of attempt `attempt` from `offset`, one slice (up to 1 MiB) after
/// another, each given to `onBytes`; returns the offset after the last.
async function readStored(id, attempt, offset, { onBytes, signal }) {
  for (;;) {
    const response = await fetch(withQuery(logPath(id), { attempt, offset }), authorized({ signal }));
    if (!response.ok) throw await errorOf(response);
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (bytes.length > 0) onBytes(bytes);
    const next = Number(response.headers.get('x-baton-next-offset'));
    if (bytes.length === 0 || !(next > offset)) return offset + bytes.length;
    offset = next;
  }
}

/// Everything attempt `attempt` of task `id` wrote so far, as slices of bytes: what a
/// download saves (the raw bytes, colours and all).
export async function readWholeLog(id, attempt, { signal } = {}) {
  const slices = [];
  await readStored(id, attempt, 0, { onBytes: (bytes) => slices.push(bytes), signal });
  return slices;
}

/// Reads attempt `attempt` of task `id` from the start, giving its bytes to `onBytes` as
/// they come (cut anywhere). Follows it while the task runs it, and returns once it is
/// over: `{ status, attempt }` of the task then, where a higher `attempt` means a retry
/// began. Stops early, quietly, when `signal` aborts.
export async function readLog(id, attempt, { onBytes, signal }) {
  const path = logPath(id);
  let offset = 0;
  const readRest = async () => {
    offset = await readStored(id, attempt, offset, { onBytes, signal });
  };

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
      onBytes(value);
    }
  }

  await readRest();
  for (;;) {
    const task = await get(`/v1/tasks/${encodeURIComponent(id)}`, { signal });
    if (TERMINAL.has(task.status) || task.attempt > attempt) {
      // What arrived between the last read and the end.
      await readRest();
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
