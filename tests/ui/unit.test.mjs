// The console's pure parts, in Node: the ANSI renderer, the SSE parser, the trace link,
// the cron describer, task ids, command words, the task form's fields, a log's lines and
// marks, search and sort, the charts' scales, and where a pipeline's graph puts its
// boxes and edges. Run by tests/ui.rs (`node --test`); each module is loaded from its
// source as the browser gets it, without a build step in between.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { cp, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// The console's folder, copied beside a package.json that says its .js files are modules
// (the browser knows that from their type; Node from the nearest package.json), so a
// module's own imports load too.
const copy = await mkdtemp(join(tmpdir(), 'baton-console-'));
await cp(new URL('../../crates/baton-server/ui/', import.meta.url), copy, { recursive: true });
await writeFile(join(copy, 'package.json'), '{"type": "module"}');
// Modules load while tests run: the copy goes when the process does.
process.on('exit', () => rmSync(copy, { recursive: true, force: true }));

/// A console module, as crates/baton-server/ui has it.
const consoleModule = (name) => import(pathToFileURL(join(copy, name)).href);

const { AnsiRenderer, ansiToHtml } = await consoleModule('ansi.js');
const { SseParser } = await consoleModule('sse.js');
const { traceLink } = await consoleModule('trace.js');

// The attack from the security review: `printf '\033]%.0s' $(seq 300000)` in a log froze
// every viewer's tab (64 KiB took 7.5 s): each unterminated opening was scanned to the
// end. A MiB of each kind of opening renders at once now.
test('a MiB of unterminated sequences renders in linear time', () => {
  for (const opening of ['\x1b]', '\x1b[1;', '\x1b]8;;\x1b[']) {
    const text = opening.repeat(Math.ceil((1 << 20) / opening.length));
    const started = performance.now();
    const html = new AnsiRenderer().push(text);
    const took = performance.now() - started;
    assert.ok(took < 2000, `${JSON.stringify(opening)}: ${took.toFixed(0)} ms`);
    assert.ok(!html.includes('\x1b'), 'no escape reaches the page');
  }
});

test('text is escaped, whatever the colours', () => {
  assert.equal(ansiToHtml('<script>alert("x")</script> & \'q\''), '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;');
  assert.equal(ansiToHtml('\x1b[31m<b>\x1b[0m'), '<span class="fg-1">&lt;b&gt;</span>');
});

test('SGR codes become classes, and a reset ends them', () => {
  assert.equal(ansiToHtml('\x1b[1;32mok\x1b[0m done'), '<span class="bold fg-2">ok</span> done');
  assert.equal(ansiToHtml('\x1b[93;44mx\x1b[39my\x1b[m'), '<span class="fg-11 bg-4">x</span><span class="bg-4">y</span>');
  assert.equal(ansiToHtml('\x1b[4mu\x1b[24mv'), '<span class="underline">u</span>v');
});

test('256-colour and true-colour codes take the nearest of the 16', () => {
  assert.equal(ansiToHtml('\x1b[38;5;196mr'), '<span class="fg-9">r</span>');
  assert.equal(ansiToHtml('\x1b[48;2;0;0;0mk'), '<span class="bg-0">k</span>');
});

test('other control sequences and characters are dropped', () => {
  assert.equal(ansiToHtml('a\x1b[2Kb\x1b[1Gc\r\n'), 'abc\n');
  assert.equal(ansiToHtml('\x1b]8;;http://x\x07link\x1b]8;;\x07'), 'link');
  assert.equal(ansiToHtml('bell\x07\tend'), 'bell\tend');
});

test('a sequence cut between two pieces of the stream is joined', () => {
  const renderer = new AnsiRenderer();
  assert.equal(renderer.push('plain \x1b[3'), 'plain ');
  assert.equal(renderer.push('1mred'), '<span class="fg-1">red</span>');
  assert.equal(renderer.push(' still'), '<span class="fg-1"> still</span>');
});

test('SSE frames are parsed across pieces, comments skipped, ids kept', () => {
  const frames = [];
  const parser = new SseParser((frame) => frames.push(frame));
  parser.push(': keep-alive\n\nid: 1-0:3\nevent: task\nda');
  parser.push('ta: {"kind":"task"}\r\n\r');
  parser.push('\nevent: resync\ndata: {"kind":"resync"}\n');
  parser.push('data: second line\n\n');
  assert.deepEqual(frames, [
    { id: '1-0:3', event: 'task', data: '{"kind":"task"}' },
    { id: '1-0:3', event: 'resync', data: '{"kind":"resync"}\nsecond line' },
  ]);
  assert.equal(parser.lastEventId, '1-0:3');
});

test('a trace link needs a template and a well-formed traceparent', () => {
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  assert.equal(traceLink('https://jaeger.example/trace/{trace_id}', traceparent), 'https://jaeger.example/trace/0af7651916cd43dd8448eb211c80319c');
  assert.equal(traceLink(null, traceparent), null);
  assert.equal(traceLink('https://jaeger.example/trace/{trace_id}', 'garbage'), null);
  assert.equal(traceLink('javascript:alert(1)//{trace_id}', traceparent), null);
});

// ---------------------------------------------------------------------------------------

const { describeCron } = await consoleModule('cron_words.js');

test('a cron expression is said in words, in each form the server takes', () => {
  const said = (e) => {
    const answer = describeCron(e);
    assert.ok(answer.ok, `${e}: ${answer.error}`);
    return answer.text;
  };
  assert.equal(said('* * * * *'), 'Every minute');
  assert.equal(said('*/5 * * * *'), 'Every 5 minutes');
  assert.equal(said('0 * * * *'), 'At minute 0 of every hour');
  assert.equal(said('30 2 * * *'), 'At 02:30, every day');
  assert.equal(said('0 9 * * MON-FRI'), 'At 09:00, on Monday through Friday');
  assert.equal(said('0 9 * * mon-fri'), 'At 09:00, on Monday through Friday', 'names in any case');
  assert.equal(said('0 9,17 * * *'), 'At 09:00 and 17:00, every day');
  assert.equal(said('*/10 9-17 * * *'), 'Every 10 minutes, between 09:00 and 17:59');
  assert.equal(said('0 */2 * * *'), 'At minute 0, every 2 hours');
  assert.equal(said('0 0 1,15 * *'), 'At 00:00, on days 1 and 15 of the month');
  assert.equal(said('0 0 1 */3 *'), 'At 00:00, on day 1 of the month, in January, April, July and October');
  assert.equal(said('0 9 * JAN-MAR *'), 'At 09:00, from January through March');
  assert.equal(said('0 0 * * 0,6'), 'At 00:00, on Sunday and Saturday');
  assert.equal(said('0 0 * * 7'), 'At 00:00, on Sunday', '7 is Sunday too');
  assert.equal(said('0 0 1 * 1'), 'At 00:00, on day 1 of the month or on Monday', 'either may match, as in Vixie cron');
});

test("croner's extensions and six fields are said too", () => {
  const said = (e) => describeCron(e).text;
  assert.equal(said('*/10 * * * * *'), 'Every 10 seconds');
  assert.equal(said('30 0 9 * * *'), 'At 09:00:30, every day');
  assert.equal(said('30 * * * * *'), 'At second 30 of every minute');
  assert.equal(said('0 0 L * *'), 'At 00:00, on the last day of the month');
  assert.equal(said('0 12 15W * *'), 'At 12:00, on the weekday nearest day 15 of the month');
  assert.equal(said('15 10 * * 5L'), 'At 10:15, on the last Friday of the month');
  assert.equal(said('15 10 * * FRI#L'), 'At 10:15, on the last Friday of the month');
  assert.equal(said('0 12 * * MON#1'), 'At 12:00, on the first Monday of the month');
  assert.equal(said('0 0 ? * *'), 'At 00:00, every day');
  assert.equal(said('@daily'), 'At 00:00 every day');
  assert.equal(said('@hourly'), 'At minute 0 of every hour');
  assert.equal(said('@weekly'), 'At 00:00 every Sunday');
});

test('a date that never comes is said so', () => {
  assert.match(describeCron('0 0 30 2 *').text, /never fires/);
  assert.doesNotMatch(describeCron('0 0 29 2 *').text, /never/, '29 February comes in leap years');
});

test('what the server refuses is explained, field by field', () => {
  const why = (e) => {
    const answer = describeCron(e);
    assert.equal(answer.ok, false, `${e} was taken: ${answer.text}`);
    return answer.error;
  };
  assert.match(why(''), /five fields/);
  assert.match(why('* * *'), /3 fields/);
  assert.match(why('* * * * * * 2030'), /7 fields/);
  assert.match(why('61 * * * *'), /minute: 61 is out of range 0-59/);
  assert.match(why('0 24 * * *'), /hour: 24/);
  assert.match(why('0 0 0 * *'), /day: 0/);
  assert.match(why('0 0 * 13 *'), /month: 13/);
  assert.match(why('0 0 * * 8'), /weekday: 8/);
  assert.match(why('0 0 * * FUNDAY'), /weekday: "FUNDAY" is not a number or a name/);
  assert.match(why('5-1 * * * *'), /goes backwards/);
  assert.match(why('*/0 * * * *'), /minute: 0 is out of range/);
  assert.match(why('*/x * * * *'), /step .* must be a number/);
  assert.match(why('@fortnightly'), /not a shorthand/);
  assert.match(why('banana'), /1 field/);
});

const { taskRef, shortOf } = await consoleModule('task_ref.js');

test('a task is named by its whole id or its last 12 hex digits', () => {
  const id = '0192f6e4-7c1a-7d3e-9b2f-5a6c8d0e1f23';
  assert.deepEqual(taskRef(id), { id });
  assert.deepEqual(taskRef(` ${id.toUpperCase()} `), { id }, 'spaces and case aside');
  assert.deepEqual(taskRef(id.replaceAll('-', '')), { id }, 'without its hyphens');
  assert.deepEqual(taskRef('5a6c8d0e1f23'), { short: '5a6c8d0e1f23' });
  assert.equal(shortOf(id), '5a6c8d0e1f23', 'the short id is what the tables show');
  for (const bad of ['', 'not-a-uuid', '5a6c8d0e1f2', '5a6c8d0e1f234', '5a6c8d0e1f2g', `${id}0`]) assert.equal(taskRef(bad), null, bad);
});

const { splitWords, joinWords } = await consoleModule('shell_words.js');

test('a command line splits into words as sh splits it', () => {
  assert.deepEqual(splitWords(`sh -c 'echo "hi there"; exit 3'`), ['sh', '-c', 'echo "hi there"; exit 3']);
  assert.deepEqual(splitWords('echo "a \\"b\\" $HOME" c\\ d  e'), ['echo', 'a "b" $HOME', 'c d', 'e']);
  assert.deepEqual(splitWords(`printf '' x`), ['printf', '', 'x'], 'an empty quoted word is a word');
  assert.deepEqual(splitWords('   '), []);
  assert.throws(() => splitWords(`echo 'open`), /single quote is not closed/);
  assert.throws(() => splitWords('echo "open'), /double quote is not closed/);
  assert.throws(() => splitWords('echo \\'), /backslash ends the line/);
});

test('words joined for the form split back into the same words', () => {
  for (const words of [['sh', '-c', "echo 'it''s' \"x\""], ['printf', '', '%s\n', 'a b'], ['ls', '-la', '/tmp']]) {
    assert.deepEqual(splitWords(joinWords(words)), words);
  }
  assert.equal(joinWords(['ls', '-la', '/tmp']), 'ls -la /tmp', 'plain words stay plain');
});

const { taskBody, formValues } = await consoleModule('task_fields.js');

test("the task form's text becomes the API's body", () => {
  const { body, errors } = taskBody({
    queue: ' builds ',
    labels: 'linux, gpu  arm64',
    mode: 'command',
    command: `sh -c 'echo "$NAME"'`,
    env: 'NAME=world\n\nEMPTY=\nEQ=a=b',
    priority: '5',
    timeout: '60',
    maxAttempts: '3',
  });
  assert.deepEqual(errors, {});
  assert.deepEqual(body, {
    queue: 'builds',
    labels: ['linux', 'gpu', 'arm64'],
    command: ['sh', '-c', 'echo "$NAME"'],
    env: { NAME: 'world', EMPTY: '', EQ: 'a=b' },
    priority: 5,
    timeout_s: 60,
    max_attempts: 3,
  });
  assert.deepEqual(taskBody({ mode: 'script', script: 'echo hi\n' }).body, { script: 'echo hi\n' });
});

test("the task form's faults are named by field", () => {
  const { errors } = taskBody({ mode: 'command', command: "echo 'x", env: 'NAME=1\nnot a pair\n', priority: 'high', timeout: '1.5' });
  assert.match(errors.command, /single quote/);
  assert.match(errors.env, /Line 2/);
  assert.equal(errors.priority, 'A whole number.');
  assert.equal(errors.timeout_s, 'A whole number.');
  assert.match(taskBody({ mode: 'command', command: '  ' }).errors.command, /program to run/);
  assert.match(taskBody({ mode: 'script', script: ' \n' }).errors.script, /script/);
  assert.match(taskBody({ mode: 'command', command: 'x', env: 'A=1\nA=2' }).errors.env, /A is given twice/);
});

test("an edited template keeps the fields the form does not show", () => {
  const template = { command: ['old'], payload: { k: 1 }, retry: { on_timeout: false }, priority: 4, notify_url: 'https://example.com/hook' };
  const values = formValues(template);
  assert.equal(values.command, 'old');
  assert.equal(values.priority, '4');
  const { body } = taskBody({ ...values, command: 'new one', priority: '' }, template);
  assert.deepEqual(body, { payload: { k: 1 }, retry: { on_timeout: false }, notify_url: 'https://example.com/hook', command: ['new', 'one'] });
});

const { LineSplitter, markAt } = await consoleModule('log_lines.js');

test("a log's bytes become numbered lines with their first byte's offset", () => {
  const splitter = new LineSplitter();
  const bytes = new TextEncoder().encode('één\ntwo\n\nfour');
  // Cut inside the first "é" (two bytes) and just after a newline.
  const pieces = [...splitter.push(bytes.subarray(0, 1)), ...splitter.push(bytes.subarray(1, 7)), ...splitter.push(bytes.subarray(7))];
  const lines = new Map();
  for (const p of pieces) {
    const line = lines.get(p.line) || { start: p.start, text: '', ended: false };
    line.text += p.text;
    line.ended = p.ended;
    lines.set(p.line, line);
  }
  assert.deepEqual([...lines.entries()], [
    [1, { start: 0, text: 'één', ended: true }],
    [2, { start: 6, text: 'two', ended: true }],
    [3, { start: 10, text: '', ended: true }],
    [4, { start: 11, text: 'four', ended: false }],
  ]);
  assert.equal(splitter.offset, bytes.length);
  assert.deepEqual(new LineSplitter().push(new TextEncoder().encode('a\n')), [{ line: 1, start: 0, text: 'a', ended: true }], 'no empty line after the last newline');
});

test("a line's time is the last mark at or before its first byte", () => {
  const marks = [
    { offset: 0, at: 't0', stream: 'stdout' },
    { offset: 10, at: 't1', stream: 'stderr' },
    { offset: 25, at: 't2', stream: 'stdout' },
  ];
  assert.equal(markAt(marks, 0).at, 't0');
  assert.equal(markAt(marks, 9).at, 't0');
  assert.equal(markAt(marks, 10).stream, 'stderr');
  assert.equal(markAt(marks, 24).at, 't1');
  assert.equal(markAt(marks, 1000).at, 't2');
  assert.equal(markAt(marks.slice(1), 3), null);
  assert.equal(markAt([], 3), null);
});

const { findAll } = await consoleModule('log_search.js');

test('a search finds every match, ignoring case, none overlapping', () => {
  assert.deepEqual(findAll('Error: error ERROR', 'error'), [0, 7, 13]);
  assert.deepEqual(findAll('aaaa', 'aa'), [0, 2]);
  assert.deepEqual(findAll('abc', ''), []);
  assert.deepEqual(findAll('abc', 'x'), []);
});

const { sortRows, parseSort, sortText } = await consoleModule('table_sort.js');

test('rows sort by a column either way, rows without a value last', () => {
  const rows = [{ n: 2, s: 'b' }, { n: null, s: 'a10' }, { n: 10, s: 'a9' }, { n: 2, s: 'c' }];
  assert.deepEqual(sortRows(rows, (r) => r.n).map((r) => r.s), ['b', 'c', 'a9', 'a10']);
  assert.deepEqual(sortRows(rows, (r) => r.n, true).map((r) => r.s), ['a9', 'b', 'c', 'a10'], 'stable, and none still last');
  assert.deepEqual(sortRows(rows, (r) => r.s).map((r) => r.s), ['a9', 'a10', 'b', 'c'], 'numbers within text in order');
  assert.deepEqual(parseSort('-created'), { column: 'created', descending: true });
  assert.equal(sortText(parseSort('status')), 'status');
  assert.equal(parseSort(''), null);
});

const { localInputOf, instantOfLocalInput, span } = await consoleModule('time.js');

test('a date field shows local time, and the address keeps the instant', () => {
  const iso = '2026-12-01T10:30:00.000Z';
  const local = localInputOf(iso);
  assert.match(local, /^\d{4}-\d\d-\d\dT\d\d:\d\d$/);
  assert.equal(instantOfLocalInput(local), iso);
  assert.equal(localInputOf(''), '');
  assert.equal(instantOfLocalInput('garbage'), '');
  assert.equal(span(62_000), '1m 02s');
});

const { niceMax, totals, linePoints } = await consoleModule('trend_chart.js');

test("the charts' scales are round and their lines break where nothing was said", () => {
  assert.deepEqual([0, 1, 3, 7, 10, 11, 45, 120].map(niceMax), [1, 1, 5, 10, 10, 20, 50, 200]);
  assert.deepEqual(totals([{ submitted: 2, succeeded: 1, failed: 1, cancelled: 2 }, { submitted: 1, succeeded: 2, failed: 0 }]), { submitted: 3, succeeded: 3, failed: 1, cancelled: 2 });
  const runs = linePoints([0, 5, null, 10], 10);
  assert.equal(runs.length, 2, 'a gap splits the line');
  assert.equal(runs[1].split(' ').length, 1);
  const [, y] = runs[1].split(',').map(Number);
  assert.equal(y, 12, 'the scale\'s top is the chart\'s top, below its label');
});

const { BOX, layout, fit, jobTime, jobTitle } = await consoleModule('pipeline_graph.js');

test("a pipeline's graph puts a column per layer and an edge per need, sparing crossings", () => {
  const job = (name, layer, needs = [], when = 'on_success') => ({ name, layer, needs, when });
  // As the API sorts them: by layer, then name.
  const jobs = [job('a', 0), job('x', 0), job('b', 1, ['a']), job('c', 1, ['a']), job('y', 1, ['x'], 'always'), job('d', 2, ['b', 'c', 'y'])];
  const { width, height, boxes, edges } = layout(jobs);
  const at = Object.fromEntries(boxes.map((b) => [b.job.name, b]));
  assert.equal(boxes.length, 6);
  assert.ok(at.a.x === at.x.x && at.a.x < at.b.x && at.b.x === at.y.x && at.b.x < at.d.x, 'a column per layer, left to right');
  assert.ok(at.b.y < at.c.y && at.c.y < at.y.y, "y sits below a's jobs, level with x which it needs");
  assert.ok(at.a.y < at.x.y);
  const columnHeight = (column) => Math.max(...column.map((b) => b.y + BOX.height)) - Math.min(...column.map((b) => b.y));
  assert.ok(Math.abs(at.d.y + BOX.height / 2 - height / 2) < 1, 'a lone job is centred on the tallest column');
  assert.ok(columnHeight([at.a, at.x]) < columnHeight([at.b, at.c, at.y]));
  for (const b of boxes) assert.ok(b.x >= 0 && b.y >= 0 && b.x + BOX.width <= width && b.y + BOX.height <= height, `${b.job.name} inside`);
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [p, q] = [boxes[i], boxes[j]];
      const apart = p.x + BOX.width <= q.x || q.x + BOX.width <= p.x || p.y + BOX.height <= q.y || q.y + BOX.height <= p.y;
      assert.ok(apart, `${p.job.name} and ${q.job.name} overlap`);
    }
  }
  assert.deepEqual(edges.map((e) => `${e.from}>${e.to}`).sort(), ['a>b', 'a>c', 'b>d', 'c>d', 'x>y', 'y>d'].sort());
  assert.equal(edges.find((e) => e.to === 'y').when, 'always', "an edge is drawn as its dependent's rule");
  const toD = edges.find((e) => e.from === 'b' && e.to === 'd');
  assert.ok(toD.path.startsWith(`M ${at.b.x + BOX.width} ${at.b.y + BOX.height / 2} `) && toD.path.endsWith(`${at.d.x} ${at.d.y + BOX.height / 2}`), "from the need's right side to the dependent's left");
});

test("a job's box says its name, time and error", () => {
  assert.equal(fit('short'), 'short');
  const long = fit('a-job-name-far-too-long-for-its-box');
  assert.equal(long.length, 22);
  assert.ok(long.endsWith('…'));
  assert.deepEqual(jobTime({ status: 'waiting' }), { text: '' });
  assert.deepEqual(jobTime({ started_at: '2026-12-01T10:00:00Z', finished_at: '2026-12-01T10:01:05Z' }), { text: '1m 05s' });
  const running = jobTime({ started_at: '2026-12-01T10:00:00Z' }, Date.parse('2026-12-01T10:00:03.5Z'));
  assert.deepEqual(running, { text: '3.5s', since: '2026-12-01T10:00:00Z' });
  const title = jobTitle({ name: 'deploy', status: 'skipped', runs: 2, needs: ['test'], when: 'on_success', error: 'skipped: a job it needs did not succeed' });
  assert.match(title, /^deploy: skipped\n/);
  assert.match(title, /run 2/);
  assert.match(title, /needs test; runs when every job it needs succeeded/);
  assert.match(title, /skipped: a job it needs did not succeed$/);
});
