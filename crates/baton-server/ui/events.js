// The cluster's event stream, `GET /v1/events`, read with fetch() so the token travels
// in the `Authorization` header (see sse.js). It reconnects by itself when the
// connection drops, resuming after the last event seen (`Last-Event-ID`); if the server
// cannot resume, it sends `resync` and the page reloads its data from the REST API.

import { authorized, errorOf, withQuery } from './api.js';
import { SseParser } from './sse.js';

/// How long to wait before connecting again: doubling from the first to the last.
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 15000;
/// A node without the event stream (404: an older node during an upgrade) is asked
/// again this rarely; the page keeps itself fresh by polling meanwhile.
const RETRY_ABSENT_MS = 60000;

/// The stream's state, as the header's indicator shows it: `connecting`, `live`,
/// `retrying` (dropped, reconnecting) or `absent` (this node has no event stream).
const listeners = new Set();
let shared = 'off';
function announce(state) {
  shared = state;
  for (const listener of listeners) listener(state);
}
export function onStateChange(listener) {
  listeners.add(listener);
  listener(shared);
  return () => listeners.delete(listener);
}

/// Follows the events that `filter` selects (`{ kind, queue, task }`, as the endpoint
/// takes them). `onEvent(payload)` gets each event's JSON; `onResync()` is called when
/// events may have been missed (a `resync` event, or a reconnect that could not
/// resume), so the page reloads. Returns a function that stops it.
export function follow(filter, { onEvent, onResync }) {
  const stopped = new AbortController();
  let lastEventId = null;

  async function connectOnce() {
    const headers = { Accept: 'text/event-stream' };
    if (lastEventId) headers['Last-Event-ID'] = lastEventId;
    const response = await fetch(
      withQuery('/v1/events', filter),
      authorized({ headers, signal: stopped.signal, cache: 'no-store' }),
    );
    if (!response.ok) throw await errorOf(response);
    announce('live');
    // After a drop, the events of the gap come first if the server still has them;
    // the page looks again anyway when it could not have them (no id to resume from).
    if (!lastEventId) onResync();
    const parser = new SseParser((frame) => {
      lastEventId = frame.id ?? lastEventId;
      let payload;
      try {
        payload = JSON.parse(frame.data);
      } catch {
        return;
      }
      if (frame.event === 'resync' || payload.kind === 'resync') onResync();
      else onEvent(payload);
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.push(value);
    }
  }

  (async () => {
    let delay = RETRY_FIRST_MS;
    announce('connecting');
    while (!stopped.signal.aborted) {
      let wait = delay;
      try {
        await connectOnce();
        delay = RETRY_FIRST_MS;
        wait = delay;
      } catch (e) {
        if (stopped.signal.aborted) return;
        if (e.status === 401) return;
        // A filter the server refuses (a malformed id, a kind this token may not see)
        // is refused again on every try: stop, rather than reconnect for ever.
        if (e.status === 400 || e.status === 403 || e.status === 422) {
          announce('off');
          return;
        }
        if (e.status === 404) wait = RETRY_ABSENT_MS;
        else delay = Math.min(delay * 2, RETRY_MAX_MS);
      }
      if (stopped.signal.aborted) return;
      announce(wait === RETRY_ABSENT_MS ? 'absent' : 'retrying');
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, wait);
        stopped.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  })();

  return () => {
    stopped.abort();
    announce('off');
  };
}

/// Whether the stream is open now; while it is not, events may not come and pages poll.
export function isLive() {
  return shared === 'live';
}
