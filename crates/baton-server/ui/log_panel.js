// A task's log on its page: one attempt at a time (a tab each), followed live while it
// runs; found in (search, next and previous), linked to line by line
// (`#/tasks/<id>?attempt=N&line=M` scrolls to line M and marks it), downloaded as the
// raw bytes, and — where the node keeps the log's marks — a time per line and stderr
// told apart from stdout.

import { ApiError, get } from './api.js';
import { actionButton, fill, h, saveFile } from './dom.js';
import { TERMINAL, readLog, readWholeLog } from './log_follow.js';
import { LogSearch } from './log_search.js';
import { LogView } from './log_view.js';
import { shortOf } from './task_ref.js';

/// How often the marks are read again while the log grows.
const MARKS_EVERY_MS = 2000;

export class LogPanel {
  /// `id`: the task's whole id. `attempt`, `line`: what the address points at, if any.
  /// `onShow(n)`: told which attempt's log is shown.
  constructor({ id, attempt = null, line = null, signal, onShow = () => {} }) {
    this.id = id;
    this.onShow = onShow;
    this.stopped = signal;
    this.shown = null;
    this.latest = 0;
    this.status = null;
    this.run = null;
    this.target = line && attempt ? { attempt, line } : line ? { attempt: null, line } : null;
    this.requestedAttempt = attempt;
    this.marksAbsent = false;

    this.tabs = h('div', { class: 'attempts', id: 'attempts' });
    this.state = h('span', { class: 'log-state', id: 'log-state' });
    this.log = h('div', { class: 'log', id: 'log', tabindex: 0, role: 'log' });
    this.log.addEventListener('click', (event) => this.lineClicked(event));
    this.search = new LogSearch(this.log);

    this.findInput = h('input', { id: 'log-search', type: 'search', placeholder: 'Find in log', 'aria-label': 'Find in log', autocomplete: 'off' });
    this.findCount = h('span', { class: 'find-count', id: 'log-search-count', 'aria-live': 'polite' });
    let typing = null;
    this.findInput.addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => this.find(), 150);
    });
    this.findInput.addEventListener('keydown', (event) => {
      if (event.key !== 'Enter') return;
      event.preventDefault();
      if (this.search.needle !== this.findInput.value) this.find();
      else if (event.shiftKey) this.search.previous();
      else this.search.next();
      this.showCount();
    });
    const previous = h('button', { type: 'button', class: 'secondary icon', id: 'log-search-previous', title: 'Previous match (Shift+Enter)', 'aria-label': 'Previous match' }, '↑');
    const next = h('button', { type: 'button', class: 'secondary icon', id: 'log-search-next', title: 'Next match (Enter)', 'aria-label': 'Next match' }, '↓');
    previous.addEventListener('click', () => {
      this.search.previous();
      this.showCount();
    });
    next.addEventListener('click', () => {
      this.search.next();
      this.showCount();
    });
    this.timesToggle = h('input', { type: 'checkbox', id: 'log-times', checked: true });
    this.timesToggle.addEventListener('change', () => this.log.classList.toggle('hide-times', !this.timesToggle.checked));
    this.timesLabel = h('label', { class: 'toggle', hidden: true, title: 'The time each line came, and stderr lines marked' }, this.timesToggle, ' Times');
    const download = actionButton('Download', () => this.download(), { class: 'secondary', id: 'log-download', title: 'The raw log of this attempt, as a file' });

    this.element = h(
      'section',
      { class: 'log-panel' },
      h('div', { class: 'log-head' }, h('h2', {}, 'Log'), this.tabs, this.state),
      h('div', { class: 'log-tools' }, h('div', { class: 'find' }, this.findInput, previous, next, this.findCount), this.timesLabel, download),
      this.log,
    );
  }

  /// The task as last read: new attempts get a tab; the first call shows the attempt
  /// the address names, or the latest.
  setTask(task) {
    this.status = task.status;
    this.latest = Math.max(task.attempt, 1);
    if (this.shown === null) {
      const asked = Number(this.requestedAttempt);
      this.show(asked >= 1 && asked <= this.latest ? asked : this.latest);
    } else {
      this.renderTabs();
    }
  }

  renderTabs() {
    fill(
      this.tabs,
      'Attempt ',
      Array.from({ length: this.latest }, (_, i) => i + 1).map((n) =>
        h('button', { type: 'button', class: n === this.shown ? 'current' : 'secondary', 'data-attempt': n, onclick: () => this.show(n) }, String(n)),
      ),
    );
  }

  lineHref(attempt, n) {
    return `#/tasks/${this.id}?attempt=${attempt}&line=${n}`;
  }

  /// Shows attempt `n`'s log from its start, following it while it runs.
  show(n) {
    if (this.run) this.run.abort();
    this.run = new AbortController();
    const run = this.run;
    const signal = AbortSignal.any([this.stopped, run.signal]);
    this.shown = n;
    this.renderTabs();
    this.onShow(n);
    const view = new LogView(this.log, (line) => this.lineHref(n, line));
    this.view = view;
    this.search.clear();
    this.showCount();
    this.log.classList.remove('has-times');
    this.timesLabel.hidden = true;
    const wanted = this.target && (this.target.attempt === null || Number(this.target.attempt) === n) ? this.target.line : null;
    let found = false;
    let researching = null;
    let marksRead = -1;
    let marksTimer = null;
    const readMarks = async () => {
      marksTimer = null;
      if (this.marksAbsent || marksRead === view.offset || signal.aborted) return;
      const upTo = view.offset;
      try {
        const { marks } = await get(`/v1/tasks/${encodeURIComponent(this.id)}/logs/marks`, { query: { attempt: n }, signal });
        if (signal.aborted) return;
        marksRead = upTo;
        view.setMarks(marks || []);
        this.timesLabel.hidden = !(marks || []).length;
      } catch (e) {
        // A node without the marks endpoint: lines go without times.
        if (e instanceof ApiError && (e.status === 404 || e.status === 405)) this.marksAbsent = true;
      }
    };
    const marksSoon = () => {
      if (marksTimer === null && !this.marksAbsent) marksTimer = setTimeout(readMarks, marksRead < 0 ? 0 : MARKS_EVERY_MS);
    };
    signal.addEventListener('abort', () => clearTimeout(marksTimer));

    fill(this.state, 'reading…');
    readLog(this.id, n, {
      signal,
      onBytes: (bytes) => {
        // Keep the view at the end while the user has not scrolled up, nor asked for a line.
        const atEnd = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 40;
        view.push(bytes);
        if (wanted && !found) found = view.target(wanted);
        else if (atEnd && !wanted) this.log.scrollTop = this.log.scrollHeight;
        // What is being looked for is looked for in the new lines too (and in another
        // attempt's log when the tab changes).
        if (this.findInput.value) {
          clearTimeout(researching);
          researching = setTimeout(() => this.find(), 400);
        }
        marksSoon();
        fill(this.state, TERMINAL.has(this.status) ? '' : 'following…');
      },
    })
      .then(({ attempt }) => {
        if (run.signal.aborted) return;
        fill(this.state, attempt > n ? `attempt ${n} ended` : 'end of log');
        if (!view.lineCount) fill(this.state, 'no output');
        if (wanted && !found) fill(this.state, `this log has no line ${wanted}`);
        marksRead = -2;
        readMarks();
        // A retry began while we followed this attempt: follow the new one.
        if (attempt > n && this.shown === n && !wanted) this.show(attempt);
      })
      .catch((e) => {
        if (!signal.aborted) fill(this.state, `log: ${e.message}`);
      });
  }

  find() {
    this.search.search(this.findInput.value);
    this.showCount();
  }

  showCount() {
    fill(this.findCount, this.search.summary());
  }

  /// A line number clicked: the address points at that line (without reloading the page).
  lineClicked(event) {
    const link = event.target.closest('a.ln');
    if (!link) return;
    event.preventDefault();
    const n = Number(link.dataset.n);
    history.replaceState(null, '', link.getAttribute('href'));
    this.target = { attempt: this.shown, line: n };
    this.view.target(n);
  }

  /// The log endpoint wants the token in a header, which a plain link cannot send: the
  /// bytes are read here and saved from memory.
  async download() {
    const attempt = this.shown;
    try {
      const slices = await readWholeLog(this.id, attempt, { signal: this.stopped });
      saveFile(new Blob(slices, { type: 'text/plain' }), `task-${shortOf(this.id)}-attempt-${attempt}.log`);
    } catch (e) {
      if (!this.stopped.aborted) fill(this.state, `download: ${e.message}`);
    }
  }

  stop() {
    if (this.run) this.run.abort();
  }
}
