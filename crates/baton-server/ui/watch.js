// Keeps a page's data fresh: it reloads when an event says something changed (a burst
// of events makes one reload), when events may have been missed (resync), and by
// polling while the event stream is not live — so a page is never silently stale.

import { follow, isLive } from './events.js';

/// Follows `filter`'s events. `onEvent(payload)` may update the page in place and
/// return true when it did; otherwise `reload()` runs (at most once per `debounceMs`).
/// `pollMs`: how often to reload while the stream is not live (or always, with
/// `alwaysPoll`, for what events do not announce: a runner's last contact, a node's
/// claims). Returns a function that stops it all.
export function watch(filter, { reload, onEvent = () => false, debounceMs = 400, pollMs = 5000, alwaysPoll = false }) {
  let timer = null;
  let running = false;
  let again = false;

  async function reloadNow() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await reload();
    } catch {
      // The page shows its own errors; the next event or poll tries again.
    } finally {
      running = false;
      if (again) {
        again = false;
        soon();
      }
    }
  }

  function soon() {
    if (timer === null) {
      timer = setTimeout(() => {
        timer = null;
        reloadNow();
      }, debounceMs);
    }
  }

  const stopFollowing = follow(filter, {
    onEvent: (payload) => {
      if (!onEvent(payload)) soon();
    },
    onResync: soon,
  });
  const poller = setInterval(() => {
    if (alwaysPoll || !isLive()) reloadNow();
  }, pollMs);

  return () => {
    stopFollowing();
    clearInterval(poller);
    if (timer !== null) clearTimeout(timer);
  };
}
