// Times that run while the page is open: an element with `data-running-since` (an
// instant) shows how long ago that was, updated every second — a running attempt's
// elapsed time, without reading the task again.

import { span } from './time.js';

/// Updates every such element under `root` each second; returns what stops it.
export function tickElapsed(root) {
  const update = () => {
    const now = Date.now();
    for (const element of root.querySelectorAll('[data-running-since]')) {
      element.textContent = span(Math.max(0, now - Date.parse(element.dataset.runningSince)));
    }
  };
  update();
  const timer = setInterval(update, 1000);
  return () => clearInterval(timer);
}
