// Schedules: when each fires next, how its last runs went, its expression in words;
// pause, resume, trigger, change (schedule_form.js) and delete for tokens that may
// change it (a `submit` token: the schedules it created).

import { del, get, post } from '../api.js';
import { describeCron } from '../cron_words.js';
import { actionButton, fill, h, shortId, statusBadge } from '../dom.js';
import { ago, when } from '../time.js';
import { watch } from '../watch.js';

/// Its next ticks as the list gives them (three), or the next one alone.
function nextFires(s) {
  if (s.next_fires?.length) return s.next_fires;
  return s.next_fire_at ? [s.next_fire_at] : [];
}

export function mount(main, { access, toast }) {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });

  async function act(schedule, action) {
    try {
      if (action === 'delete') {
        if (!window.confirm(`Delete schedule ${schedule.name}? No tick of it fires again; the tasks it made stay.`)) return;
        await del(`/v1/schedules/${encodeURIComponent(schedule.id)}`);
        toast(`Deleted schedule ${schedule.name}.`);
        await load();
        return;
      }
      await post(`/v1/schedules/${encodeURIComponent(schedule.id)}/${action}`);
      const done = { pause: 'Paused', resume: 'Resumed', trigger: 'Triggered' }[action];
      toast(`${done} schedule ${schedule.name}.`);
      await load();
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function lastRun(run) {
    return h(
      'li',
      {},
      h('span', { title: when(run.scheduled_for) }, ago(run.scheduled_for)),
      ' ',
      run.task ? h('a', { href: `#/tasks/${run.task.id}` }, statusBadge(run.task.status)) : h('span', { class: 'outcome' }, run.outcome),
    );
  }

  function row(s) {
    return h(
      'tr',
      { 'data-schedule-id': s.id },
      h('td', {}, h('a', { href: `#/tasks?schedule=${s.id}` }, h('strong', {}, s.name)), ' ', shortId(s.id)),
      h('td', {}, h('code', {}, s.cron), ` ${s.timezone}`, h('div', { class: 'hint cron-said' }, describeCron(s.cron).text || '')),
      h('td', {}, h('span', { class: `state state-${s.paused ? 'paused' : 'online'}` }, s.paused ? 'paused' : 'active')),
      h('td', {}, nextFires(s).length ? h('ul', { class: 'times' }, nextFires(s).slice(0, 3).map((t) => h('li', { title: t }, when(t)))) : '—'),
      h('td', {}, s.last_runs?.length ? h('ul', { class: 'times' }, s.last_runs.slice(0, 3).map(lastRun)) : '—'),
      h('td', {}, `${s.fired_count} fired, ${s.skipped_count} skipped`),
      access.changeTasks
        ? h(
            'td',
            {},
            h(
              'div',
              { class: 'row-actions' },
              s.paused
                ? actionButton('Resume', () => act(s, 'resume'), { 'data-action': 'resume' })
                : actionButton('Pause', () => act(s, 'pause'), { 'data-action': 'pause', class: 'secondary' }),
              actionButton('Trigger now', () => act(s, 'trigger'), { 'data-action': 'trigger', class: 'secondary' }),
              h('a', { href: `#/schedules/${s.id}`, class: 'button secondary', 'data-action': 'edit' }, 'Edit'),
              actionButton('Delete', () => act(s, 'delete'), { 'data-action': 'delete', class: 'danger' }),
            ),
          )
        : null,
    );
  }

  async function load() {
    let schedules;
    try {
      ({ schedules } = await get('/v1/schedules'));
      error.hidden = true;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      throw e;
    }
    // The list carries each schedule's next ticks and latest runs: one request a load,
    // however many schedules.
    fill(body, schedules.length ? schedules.map(row) : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No schedule.')));
  }

  const headings = ['Schedule', 'Cron', 'State', 'Next fires', 'Last runs', 'Counts'];
  if (access.changeTasks) headings.push('');
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Schedules'), access.changeTasks ? h('a', { href: '#/schedules/new', class: 'button', id: 'new-schedule' }, 'New schedule') : null),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'schedules' }, h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))), body)),
  );
  load().catch(() => {});
  // A fire is an event; the runs' statuses change with their tasks: look every 10 s.
  return watch({ kind: 'schedule' }, { reload: load, alwaysPoll: true, pollMs: 10000 });
}
