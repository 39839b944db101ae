// A cron expression in words, shown beside the schedule form's field as it is typed, so
// a person sees what `0 9 * * MON-FRI` means before saving it.
//
// The forms the server takes (croner, as baton-core/src/cron.rs sets it up): five fields
// (minute hour day-of-month month day-of-week), six with seconds first, or @hourly,
// @daily, @weekly, @monthly, @yearly (@annually, @midnight: croner's aliases). A field
// holds `*` or `?`, a number, a range `a-b`, a step `*/n`, `a/n` or `a-b/n`, or a list
// of those; months and weekdays may be names (JAN, MON); the day of month may be `L`
// (its last day) or `15W` (the weekday nearest the 15th); the day of week `5#2` (the
// second Friday), `5#L` or `5L` (the last Friday); 0 and 7 are both Sunday. A day of
// month and a day of week both given match when either does, as in Vixie cron.
//
// The server decides: this only describes, and says why an expression looks wrong. No
// imports, so the unit tests load it as it is.

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];
const WEEKDAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const MONTH_NAMES = Object.fromEntries(MONTHS.map((m, i) => [m.slice(0, 3).toUpperCase(), i + 1]));
const WEEKDAY_NAMES = Object.fromEntries(WEEKDAYS.map((d, i) => [d.slice(0, 3).toUpperCase(), i]));
/// The most days each month can have (February: in a leap year).
const MONTH_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const ORDINALS = ['', 'first', 'second', 'third', 'fourth', 'fifth'];

const SHORTHANDS = {
  '@yearly': 'At 00:00 on 1 January, once a year',
  '@annually': 'At 00:00 on 1 January, once a year',
  '@monthly': 'At 00:00 on day 1 of every month',
  '@weekly': 'At 00:00 every Sunday',
  '@daily': 'At 00:00 every day',
  '@midnight': 'At 00:00 every day',
  '@hourly': 'At minute 0 of every hour',
};

const FIELDS = {
  second: { min: 0, max: 59 },
  minute: { min: 0, max: 59 },
  hour: { min: 0, max: 23 },
  day: { min: 1, max: 31 },
  month: { min: 1, max: 12, names: MONTH_NAMES },
  weekday: { min: 0, max: 7, names: WEEKDAY_NAMES },
};

class CronError extends Error {}

/// `{ ok: true, text }`: the expression in words; `{ ok: false, error }`: why the
/// server will likely refuse it.
export function describeCron(expression) {
  try {
    return { ok: true, text: describe(String(expression ?? '').trim()) };
  } catch (e) {
    if (e instanceof CronError) return { ok: false, error: e.message };
    throw e;
  }
}

function describe(expression) {
  if (!expression) throw new CronError('Empty: five fields (minute hour day month weekday), or @daily and the like.');
  if (expression.startsWith('@')) {
    const text = SHORTHANDS[expression.toLowerCase()];
    if (!text) throw new CronError(`${expression} is not a shorthand: use @hourly, @daily, @weekly, @monthly or @yearly.`);
    return text;
  }
  const parts = expression.split(/\s+/);
  if (parts.length !== 5 && parts.length !== 6) {
    throw new CronError(`${parts.length} field${parts.length === 1 ? '' : 's'}: give five (minute hour day month weekday), or six with seconds first.`);
  }
  const withSeconds = parts.length === 6;
  const [second, minute, hour, day, month, weekday] = withSeconds ? parts : ['0', ...parts];
  const f = {
    second: parseField('second', second),
    minute: parseField('minute', minute),
    hour: parseField('hour', hour),
    day: parseField('day', day),
    month: parseField('month', month),
    weekday: parseField('weekday', weekday),
  };
  const time = timeOfDay(f);
  const pieces = [time.text, days(f, time.clock), months(f.month)].filter(Boolean);
  let text = pieces.join(', ');
  text = text[0].toUpperCase() + text.slice(1);
  const never = impossibleDate(f);
  return never ? `${text} — ${never}` : text;
}

// ---------------------------------------------------------------------------------------
// Parsing: a field is a list of items, each `{ any }`, `{ value }`, `{ from, to }`, with
// a `step`, or one of the day fields' specials (`last`, `nearestWeekday`, `nth`).

function parseField(name, text) {
  const items = text.split(',').map((item) => parseItem(name, item));
  if (items.some((i) => i.any) && items.length > 1) throw new CronError(`${name}: * cannot be part of a list.`);
  return items;
}

function parseItem(name, text) {
  const spec = FIELDS[name];
  if (text === '') throw new CronError(`${name}: an empty item (two commas in a row?).`);
  const upper = text.toUpperCase();
  if (name === 'day') {
    if (upper === 'L') return { last: true };
    const nearest = /^(\d+)W$/.exec(upper);
    if (nearest) return { nearestWeekday: number(name, nearest[1], 1, 31) };
  }
  if (name === 'weekday') {
    const nth = /^([A-Z]+|\d+)#([1-5]|L)$/.exec(upper) || /^([A-Z]+|\d+)(L)$/.exec(upper);
    if (nth) return { nth: nth[2] === 'L' ? 'last' : Number(nth[2]), value: weekdayOf(number(name, nth[1], 0, 7)) };
  }
  const [range, stepText, extra] = upper.split('/');
  if (extra !== undefined) throw new CronError(`${name}: "${text}" has two steps.`);
  let step = null;
  if (stepText !== undefined) {
    if (!/^\d+$/.test(stepText)) throw new CronError(`${name}: the step in "${text}" must be a number.`);
    step = number(name, stepText, 1, spec.max);
  }
  if (range === '*' || range === '?') return step ? { from: spec.min, to: spec.max, step, any: step === 1 } : { any: true };
  const bounds = range.split('-');
  if (bounds.length > 2) throw new CronError(`${name}: "${text}" is not a range.`);
  const from = number(name, bounds[0], spec.min, spec.max);
  if (bounds.length === 2) {
    const to = number(name, bounds[1], spec.min, spec.max);
    if (to < from) throw new CronError(`${name}: the range ${range} goes backwards.`);
    return { from, to, step: step || 1 };
  }
  // `a/n`: from a to the field's end, every n.
  return step ? { from, to: spec.max, step } : { value: from };
}

/// A number or, in the month and weekday fields, a name; within the field's bounds.
function number(name, text, min, max) {
  const spec = FIELDS[name];
  let n;
  if (/^\d+$/.test(text)) n = Number(text);
  else if (spec.names && text.toUpperCase() in spec.names) n = spec.names[text.toUpperCase()];
  else throw new CronError(`${name}: "${text}" is not a number${spec.names ? ' or a name' : ''}.`);
  if (n < min || n > max) throw new CronError(`${name}: ${n} is out of range ${min}-${max}.`);
  return n;
}

const weekdayOf = (n) => n % 7;

/// The values a field's plain items take (specials left out), ascending; null for `*`.
function values(items, name) {
  if (items.some((i) => i.any)) return null;
  const out = new Set();
  for (const item of items) {
    if (item.value !== undefined && item.nth === undefined) out.add(name === 'weekday' ? weekdayOf(item.value) : item.value);
    if (item.from !== undefined) {
      for (let v = item.from; v <= item.to; v += item.step) out.add(name === 'weekday' ? weekdayOf(v) : v);
    }
  }
  return [...out].sort((a, b) => a - b);
}

const isAny = (items) => items.length === 1 && items[0].any;
const single = (items) => (items.length === 1 && items[0].value !== undefined && items[0].nth === undefined ? items[0].value : null);
/// `*/n` over the whole field: "every n".
const everyStep = (items, name) => (items.length === 1 && items[0].step > 1 && items[0].from === FIELDS[name].min && items[0].to === FIELDS[name].max ? items[0].step : null);

// ---------------------------------------------------------------------------------------
// Words.

function list(words) {
  if (words.length <= 1) return words.join('');
  return `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

const pad = (n) => String(n).padStart(2, '0');

/// A list item as words: `5`, `5 through 10`, `every 2 from 5 through 10`.
function itemWords(item, show, name) {
  if (item.value !== undefined) return show(item.value);
  const span = `${show(item.from)} through ${show(item.to)}`;
  if (item.step === 1) return span;
  return `every ${item.step}${name === 'hour' ? ' hours' : ''} from ${span}`;
}

/// Plain numbers only: no range, step or special.
const plain = (items) => items.every((i) => i.value !== undefined && i.nth === undefined);

/// When in the day: `{ text, clock }`, `clock` when it names clock times (09:00).
function timeOfDay(f) {
  const s = single(f.second);
  const clock = (hour, minute) => `${pad(hour)}:${pad(minute)}${s ? `:${pad(s)}` : ''}`;
  if (s !== null && plain(f.hour) && plain(f.minute)) {
    const hours = values(f.hour, 'hour');
    const minutes = values(f.minute, 'minute');
    if (hours.length * minutes.length <= 4) {
      return { text: `at ${list(hours.flatMap((hour) => minutes.map((minute) => clock(hour, minute))))}`, clock: true };
    }
  }
  const parts = [];
  // Seconds are said only when they are not each minute's first.
  if (s !== 0) {
    const seconds = unitWords(f.second, 'second');
    const stepped = isAny(f.second) || everyStep(f.second, 'second');
    parts.push(!stepped && isAny(f.minute) ? `${seconds} of every minute` : seconds);
  }
  // "Every 10 seconds" says every minute already.
  if (!(s !== 0 && isAny(f.minute))) {
    const minutes = unitWords(f.minute, 'minute');
    const stepped = isAny(f.minute) || everyStep(f.minute, 'minute');
    parts.push(!stepped && isAny(f.hour) ? `${minutes} of every hour` : minutes);
  }
  const hours = hourWords(f.hour);
  if (hours) parts.push(hours);
  return { text: parts.join(', '), clock: false };
}

/// Seconds or minutes in words.
function unitWords(items, unit) {
  if (isAny(items)) return `every ${unit}`;
  const step = everyStep(items, unit);
  if (step) return `every ${step} ${unit}s`;
  const one = single(items);
  if (one !== null) return `at ${unit} ${one}`;
  if (items.length === 1 && items[0].step) {
    const i = items[0];
    const span = i.to === FIELDS[unit].max ? `from ${unit} ${i.from}` : `from ${unit} ${i.from} through ${i.to}`;
    return i.step === 1 ? `every ${unit} ${span}` : `every ${i.step} ${unit}s ${span}`;
  }
  return `at ${unit}s ${list(items.map((i) => itemWords(i, String, unit)))}`;
}

function hourWords(items) {
  if (isAny(items)) return '';
  const step = everyStep(items, 'hour');
  if (step) return `every ${step} hours`;
  if (items.length === 1 && items[0].step) {
    const { from, to, step: every } = items[0];
    if (every === 1) return `between ${pad(from)}:00 and ${pad(to)}:59`;
    return `every ${every} hours from ${pad(from)}:00 through ${pad(to)}:00`;
  }
  return `during hour${plain(items) && items.length === 1 ? '' : 's'} ${list(items.map((i) => itemWords(i, pad, 'hour')))}`;
}

function dayOfMonthWords(items) {
  if (plain(items)) {
    const days = values(items, 'day');
    return `on day${days.length === 1 ? '' : 's'} ${list(days.map(String))} of the month`;
  }
  const words = items.map((i) => {
    if (i.last) return 'the last day';
    if (i.nearestWeekday) return `the weekday nearest day ${i.nearestWeekday}`;
    if (i.value !== undefined) return `day ${i.value}`;
    if (i.step === 1) return `days ${i.from} through ${i.to}`;
    return `every ${ordinal(i.step)} day from day ${i.from}${i.to === 31 ? '' : ` through ${i.to}`}`;
  });
  return `on ${list(words)} of the month`;
}

function weekdayWords(items) {
  const words = items.map((i) => {
    if (i.nth === 'last') return `the last ${WEEKDAYS[i.value]} of the month`;
    if (i.nth) return `the ${ORDINALS[i.nth]} ${WEEKDAYS[i.value]} of the month`;
    if (i.value !== undefined) return WEEKDAYS[weekdayOf(i.value)];
    if (i.step === 1) return `${WEEKDAYS[weekdayOf(i.from)]} through ${WEEKDAYS[weekdayOf(i.to)]}`;
    return list(values([i], 'weekday').map((d) => WEEKDAYS[d]));
  });
  return `on ${list(words)}`;
}

/// Which days; `clock`: the time said clock times, which read better followed by "every
/// day" than alone.
function days(f, clock) {
  const dayAny = isAny(f.day);
  const weekdayAny = isAny(f.weekday);
  if (dayAny && weekdayAny) return clock && isAny(f.month) ? 'every day' : '';
  if (weekdayAny) return dayOfMonthWords(f.day);
  if (dayAny) return weekdayWords(f.weekday);
  return `${dayOfMonthWords(f.day)} or ${weekdayWords(f.weekday)}`;
}

function months(items) {
  if (isAny(items)) return '';
  if (items.length === 1 && items[0].from !== undefined && items[0].step === 1) {
    return `from ${MONTHS[items[0].from - 1]} through ${MONTHS[items[0].to - 1]}`;
  }
  return `in ${list(values(items, 'month').map((m) => MONTHS[m - 1]))}`;
}

function ordinal(n) {
  const suffix = n % 100 >= 11 && n % 100 <= 13 ? 'th' : { 1: 'st', 2: 'nd', 3: 'rd' }[n % 10] || 'th';
  return `${n}${suffix}`;
}

/// Days of month that no month given has (30 February): such an expression never fires,
/// and the server accepts it all the same.
function impossibleDate(f) {
  if (!isAny(f.weekday)) return null;
  if (f.day.some((i) => i.last || i.nearestWeekday)) return null;
  const daysOfMonth = values(f.day, 'day');
  const monthList = values(f.month, 'month');
  if (!daysOfMonth || !monthList) return null;
  const longest = Math.max(...monthList.map((m) => MONTH_DAYS[m - 1]));
  return daysOfMonth.every((d) => d > longest) ? 'no such date: it never fires' : null;
}
