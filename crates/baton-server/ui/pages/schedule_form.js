// Making a schedule (`#/schedules/new`, `POST /v1/schedules`), or changing or deleting
// one (`#/schedules/<id>`, `PATCH` and `DELETE /v1/schedules/{id}`): its name, cron
// expression — said in words beside the field as it is typed (cron_words.js) — zone,
// overlap and catch-up policies, jitter, and the task each tick makes. The server's
// refusal is shown beside the button, and under the field it names.

import { del, get, patch, post } from '../api.js';
import { actionButton, fill, h } from '../dom.js';
import { describeCron } from '../cron_words.js';
import { faultOf, formField, showFaults, taskForm } from '../task_form.js';
import { when } from '../time.js';

const OVERLAP = [
  ['skip', 'skip the tick'],
  ['allow', 'run alongside'],
  ['queue', 'queue one tick until it ends'],
  ['cancel', 'cancel the unfinished run'],
];
const CATCH_UP = [
  ['latest', 'fire the latest'],
  ['all', 'fire them all'],
  ['skip', 'skip them'],
];

/// Every IANA zone the browser knows, for the zone field's suggestions.
function zones() {
  try {
    return ['UTC', ...Intl.supportedValuesOf('timeZone').filter((z) => z !== 'UTC')];
  } catch {
    return ['UTC'];
  }
}

function select(id, choices, value) {
  const element = h('select', { id, name: id }, choices.map(([v, text]) => h('option', { value: v }, `${v}: ${text}`)));
  element.value = value;
  return element;
}

export function mount(main, { access, toast }, route) {
  const editing = route.id !== 'new';
  const stopped = new AbortController();
  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/schedules' }, '← Schedules'));
  const title = h('h1', {}, editing ? 'Schedule' : 'New schedule');
  const error = h('p', { class: 'error form-error', id: 'schedule-error', role: 'alert', hidden: true });
  const place = h('div');
  main.append(crumbs, h('div', { class: 'page-head' }, title), error, place);

  function build(schedule) {
    const s = schedule || { name: '', cron: '', timezone: 'UTC', overlap: 'skip', catch_up: 'latest', jitter_s: 0, paused: false, task: {} };
    const words = h('p', { class: 'cron-words', id: 'cron-words', 'aria-live': 'polite' });
    const zoneList = h('datalist', { id: 'zones' }, zones().map((z) => h('option', { value: z })));
    const fields = {
      name: formField('Name', h('input', { id: 'schedule-name', name: 'name', value: s.name, autocomplete: 'off', maxlength: 128, placeholder: 'nightly-report' }), { name: 'name' }),
      cron: formField('When (cron)', h('input', { id: 'schedule-cron', name: 'cron', value: s.cron, autocomplete: 'off', spellcheck: 'false', class: 'code', placeholder: '0 3 * * *' }), {
        name: 'cron',
        hint: 'minute hour day month weekday (seconds first for six fields), or @hourly, @daily, @weekly, @monthly, @yearly',
      }),
      timezone: formField('Time zone', h('input', { id: 'schedule-timezone', name: 'timezone', value: s.timezone, list: 'zones', autocomplete: 'off', spellcheck: 'false' }), { name: 'timezone' }),
      overlap: formField('A tick while the last run is unfinished', select('schedule-overlap', OVERLAP, s.overlap), { name: 'overlap' }),
      catch_up: formField('Ticks missed while no node could fire them', select('schedule-catch-up', CATCH_UP, s.catch_up), { name: 'catch_up' }),
      jitter_s: formField('Jitter (s)', h('input', { id: 'schedule-jitter', name: 'jitter_s', type: 'number', min: 0, max: 3600, step: 1, value: String(s.jitter_s || 0) }), {
        name: 'jitter_s',
        hint: 'Each tick’s task starts up to this late, spread evenly.',
      }),
    };
    fields.cron.row.insertBefore(words, fields.cron.row.querySelector('.hint'));
    const paused = h('input', { type: 'checkbox', id: 'schedule-paused', checked: !!s.paused });
    const template = taskForm(s.task, 'template');

    const describe = () => {
      const said = describeCron(fields.cron.control.value);
      words.classList.toggle('error-text', !said.ok);
      fill(words, said.ok ? said.text : said.error);
    };
    fields.cron.control.addEventListener('input', describe);
    describe();

    const save = h('button', { type: 'submit', id: 'save-schedule' }, editing ? 'Save' : 'Create');
    const form = h(
      'form',
      { class: 'form', id: 'schedule-form', novalidate: true },
      h('fieldset', {}, fields.name.row, fields.cron.row, h('div', { class: 'field-row' }, fields.timezone.row, fields.jitter_s.row), fields.overlap.row, fields.catch_up.row, zoneList,
        editing ? null : h('label', { class: 'toggle' }, paused, ' Created paused: no tick fires until it is resumed')),
      h('h2', {}, 'The task each tick makes'),
      template.element,
      h(
        'div',
        { class: 'form-actions' },
        save,
        h('a', { href: '#/schedules' }, 'Cancel'),
        editing ? actionButton('Delete', () => remove(schedule), { class: 'danger', id: 'delete-schedule' }) : null,
      ),
    );
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      error.hidden = true;
      const { body: task, errors } = template.read(s.task);
      const jitter = fields.jitter_s.control.value.trim();
      const ownErrors = {};
      if (!fields.name.control.value.trim()) ownErrors.name = 'Give it a name.';
      if (!fields.cron.control.value.trim()) ownErrors.cron = 'Say when it fires.';
      if (jitter && !/^\d+$/.test(jitter)) ownErrors.jitter_s = 'A whole number of seconds.';
      showFaults(fields, ownErrors);
      if (Object.keys(errors).length || Object.keys(ownErrors).length) {
        fill(error, 'Some fields need a change (see below).');
        error.hidden = false;
        return;
      }
      const body = {
        name: fields.name.control.value.trim(),
        cron: fields.cron.control.value.trim(),
        timezone: fields.timezone.control.value.trim() || 'UTC',
        overlap: fields.overlap.control.value,
        catch_up: fields.catch_up.control.value,
        jitter_s: jitter ? Number(jitter) : 0,
        task,
      };
      if (!editing) body.paused = paused.checked;
      save.disabled = true;
      try {
        const saved = editing ? await patch(`/v1/schedules/${encodeURIComponent(schedule.id)}`, body) : await post('/v1/schedules', body);
        toast(`${editing ? 'Saved' : 'Created'} schedule ${saved.name}${saved.next_fire_at ? `: it fires next at ${when(saved.next_fire_at)}` : ''}.`);
        location.hash = '#/schedules';
      } catch (e) {
        showFaults(fields, faultOf(e.message, Object.keys(fields)));
        showFaults(template.fields, e.message.startsWith('task.') ? faultOf(e.message, Object.keys(template.fields)) : {});
        fill(error, `Not saved: ${e.message}`);
        error.hidden = false;
      } finally {
        save.disabled = false;
      }
    });
    if (!access.changeTasks) for (const control of form.querySelectorAll('input, select, textarea, button')) control.disabled = true;
    fill(place, form, schedule?.next_fires?.length ? [h('h2', {}, 'Next ticks'), h('ul', { class: 'times', id: 'next-ticks' }, schedule.next_fires.map((t) => h('li', { title: t }, when(t))))] : null);
    fields[editing ? 'cron' : 'name'].control.focus();
  }

  async function remove(schedule) {
    if (!window.confirm(`Delete schedule ${schedule.name}? No tick of it fires again; the tasks it made stay.`)) return;
    try {
      await del(`/v1/schedules/${encodeURIComponent(schedule.id)}`);
      toast(`Deleted schedule ${schedule.name}.`);
      location.hash = '#/schedules';
    } catch (e) {
      fill(error, `Not deleted: ${e.message}`);
      error.hidden = false;
    }
  }

  if (!editing) {
    build(null);
  } else {
    get(`/v1/schedules/${encodeURIComponent(route.id)}`, { signal: stopped.signal })
      .then((schedule) => {
        fill(title, 'Schedule ', h('span', { class: 'name' }, schedule.name));
        build(schedule);
      })
      .catch((e) => {
        if (stopped.signal.aborted) return;
        fill(error, e.status === 404 || e.status === 400 || e.status === 422 ? 'No schedule has this id, or this token may not see it.' : `Could not read the schedule: ${e.message}`);
        error.hidden = false;
      });
  }
  return () => stopped.abort();
}
