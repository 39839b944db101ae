// The console in Chromium, scenario by scenario, against the cluster tests/ui.rs
// started. Every wait polls with a deadline; none sleeps for a fixed time. Prints one
// line per scenario and `N passed, M failed` last; exits non-zero if any failed.
// Screenshots: each page as shown (`tasks.png`, `task.png` …), `narrow-*.png` at 390 px
// wide, `dark-*.png` with a dark system theme, `failed-N.png` where scenario N failed.
//
// Talks to tests/ui.rs on stdin/stdout: prints `kill <node id>` and waits for `killed`.

import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (tests/ui.rs sets it)`);
  return value;
};
const BASE = env('BATON_UI_URL');
const TOKEN = env('BATON_UI_TOKEN');
const SCREENSHOTS = env('BATON_UI_SCREENSHOTS');
const DOOMED = env('BATON_UI_DOOMED_NODE');
const SURVIVOR = env('BATON_UI_SURVIVOR_NODE');
const HELD_TASK = env('BATON_UI_HELD_TASK');
// Where the test leaves files its tasks look for: not /tmp, which each task has its own of.
const SHARED_DIR = env('BATON_UI_SHARED_DIR');
const CHROMIUM = process.env.BATON_UI_CHROMIUM || '/usr/bin/chromium';

/// How long a change may take to show: an event's way through the cluster, or a poll.
const SHOWS_WITHIN = 20_000;
/// How long a task may take to run here (a shared 2-core machine).
const RUNS_WITHIN = 45_000;

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/// Asks tests/ui.rs to do something only it can (kill a process) and waits for its word.
async function askTheTest(request, answer) {
  console.log(request);
  const { value } = await stdin.next();
  if (value !== answer) throw new Error(`asked "${request}", got "${value}" instead of "${answer}"`);
}

/// The API, as a user's own script calls it.
async function api(method, path, body, headers = {}) {
  const response = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const submit = (task, headers) => api('POST', '/v1/tasks', task, headers);

/// A task's raw log, as the API gives it.
async function rawLog(id, attempt) {
  const response = await fetch(`${BASE}/v1/tasks/${id}/logs?attempt=${attempt}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  if (!response.ok) throw new Error(`log of ${id}: ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

/// Waits until the API says task `id` has ended.
async function ended(id) {
  const deadline = Date.now() + RUNS_WITHIN;
  for (;;) {
    const task = await api('GET', `/v1/tasks/${id}`);
    if (['succeeded', 'failed', 'cancelled', 'timed_out', 'expired', 'skipped'].includes(task.status)) return task;
    if (Date.now() > deadline) throw new Error(`task ${id} is still ${task.status}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// ---------------------------------------------------------------------------------------

mkdirSync(SCREENSHOTS, { recursive: true });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
/// What went wrong inside any page: uncaught exceptions and refused content (CSP).
const pageProblems = [];

async function newPage(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 }, ...options });
  const page = await context.newPage();
  page.on('pageerror', (error) => pageProblems.push(`uncaught: ${error.message}`));
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() === 'error' && /Content.Security.Policy|Refused to/i.test(text)) pageProblems.push(text);
  });
  await page.goto(`${BASE}/ui/`);
  return page;
}

async function signIn(page, token) {
  await page.fill('#token', token);
  await page.click('#sign-in button[type=submit]');
}

/// Waits until `predicate(arg)`, run in the page, is true; says `what` if it never is.
async function until(page, what, predicate, arg, timeout = SHOWS_WITHIN) {
  try {
    await page.waitForFunction(predicate, arg, { timeout, polling: 100 });
  } catch (e) {
    throw new Error(`${what} (not within ${timeout / 1000}s)`);
  }
}

const textOf = (selector) => document.querySelector(selector)?.textContent ?? '';
const screenshot = (page, name) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });

const results = [];
let page = null;

async function scenario(name, run) {
  try {
    await run();
    results.push(true);
    console.log(`ok: ${name}`);
  } catch (error) {
    results.push(false);
    console.log(`FAILED: ${name}: ${error.message}`);
    if (page) await screenshot(page, `failed-${results.length}`).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------

await scenario('the console is served with its security headers', async () => {
  const response = await fetch(`${BASE}/ui/`);
  const headers = response.headers;
  const csp = headers.get('content-security-policy') || '';
  if (!csp.includes("default-src 'self'")) throw new Error(`Content-Security-Policy: ${csp}`);
  if (headers.get('x-frame-options') !== 'DENY') throw new Error('X-Frame-Options is not DENY');
  if (headers.get('x-content-type-options') !== 'nosniff') throw new Error('no nosniff');
  const script = await fetch(`${BASE}/ui/app.js`);
  if (!script.headers.get('content-type').startsWith('text/javascript')) throw new Error('app.js is not served as JavaScript');
  const config = await (await fetch(`${BASE}/ui/config.json`)).json();
  if (config.trace_url !== 'https://jaeger.example/trace/{trace_id}') throw new Error(`config.json: ${JSON.stringify(config)}`);
  const openapi = await (await fetch(`${BASE}/openapi.json`)).json();
  if (Object.keys(openapi.paths).some((p) => p.startsWith('/ui'))) throw new Error('/ui is in the OpenAPI document');
});

await scenario('a wrong token is refused with a clear message', async () => {
  page = await newPage();
  await signIn(page, `bat_${'0'.repeat(64)}`);
  await until(page, 'the sign-in form to say the token was refused', () => /refused/.test(document.querySelector('#sign-in-error:not([hidden])')?.textContent ?? ''));
  if (await page.locator('#tasks').count()) throw new Error('the console opened with a wrong token');
  await screenshot(page, 'sign-in-refused');
});

await scenario('an admin signs in and sees the task list', async () => {
  await signIn(page, TOKEN);
  await page.locator('#tasks').waitFor({ timeout: SHOWS_WITHIN });
  await until(page, 'the header to show the admin scope', () => document.body.dataset.scopes === 'admin');
  const stored = await page.evaluate(() => sessionStorage.getItem('baton.token'));
  if (stored !== TOKEN) throw new Error('the token is not kept in sessionStorage');
  if (page.url().includes(TOKEN)) throw new Error('the token is in the address');
});

await scenario('a submitted task appears and turns succeeded without a reload', async () => {
  await until(page, 'the event stream (GET /v1/events) to be live', () => document.getElementById('live')?.dataset.state === 'live');
  await page.evaluate(() => {
    window.sameDocument = true;
  });
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  const task = await submit({ command: ['sh', '-c', 'echo hello from the console test'] }, { traceparent });
  await until(page, `task ${task.id} to appear in the list`, (id) => !!document.querySelector(`tr[data-task-id="${id}"]`), task.id);
  await until(page, `task ${task.id} to show succeeded`, (id) => !!document.querySelector(`tr[data-task-id="${id}"] [data-status="succeeded"]`), task.id, RUNS_WITHIN);
  if (!(await page.evaluate(() => window.sameDocument === true))) throw new Error('the page was reloaded');
  await screenshot(page, 'tasks');
});

await scenario("a running task's log follows live, in colour", async () => {
  const gate = join(SHARED_DIR, `baton-ui-gate-${randomUUID()}`);
  const script = [
    "printf '\\033[32mfirst line\\033[0m\\n'",
    // Waits for the browser to have shown the first line (at most a minute).
    'i=0; while [ ! -e "$GATE" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done',
    "printf 'second line \\033[1;31min bold red\\033[0m\\n'",
  ].join('\n');
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const task = await submit({ script, env: { GATE: gate } }, { traceparent });
  await page.goto(`${BASE}/ui/#/tasks/${task.id}`);
  await until(page, 'the first line, in green', () => /first line/.test(document.querySelector('#log .fg-2')?.textContent ?? ''), undefined, RUNS_WITHIN);
  const early = await page.evaluate(textOf, '#log');
  if (early.includes('second line')) throw new Error('the second line was there before it was printed');
  await until(page, 'the task to show running', () => !!document.querySelector('.page-head [data-status="running"]'));
  writeFileSync(gate, '');
  try {
    await until(page, 'the second line to follow, in bold red', () => /in bold red/.test(document.querySelector('#log .bold.fg-1')?.textContent ?? ''));
    await until(page, 'the task to show succeeded', () => !!document.querySelector('.page-head [data-status="succeeded"]'), undefined, RUNS_WITHIN);
  } finally {
    rmSync(gate, { force: true });
  }
  const trace = await page.getAttribute('#trace-link', 'href');
  if (trace !== 'https://jaeger.example/trace/4bf92f3577b34da6a3ce929d0e0e4736') throw new Error(`trace link: ${trace}`);
  await until(page, 'the exit code', () => document.querySelector('[data-field="exit-code"]')?.textContent === '0');
  await screenshot(page, 'task');
});

await scenario('a running task is cancelled from its page', async () => {
  const task = await submit({ command: ['sleep', '300'] });
  await page.goto(`${BASE}/ui/#/tasks/${task.id}`);
  await until(page, 'the task to show running', () => !!document.querySelector('.page-head [data-status="running"]'), undefined, RUNS_WITHIN);
  await page.click('#cancel');
  await until(page, 'the task to show cancelled', () => !!document.querySelector('.page-head [data-status="cancelled"]'), undefined, RUNS_WITHIN);
});

await scenario('the list filters by label and by text, and cancels a selection', async () => {
  const marker = `100%_done-${randomUUID().slice(0, 8)}`;
  const waiting = [];
  for (let i = 0; i < 2; i++) waiting.push(await submit({ labels: ['nobody-runs-this'], command: ['echo', `${marker}-${i}`] }));
  await submit({ command: ['echo', 'another 100% task'] });
  await page.goto(`${BASE}/ui/#/tasks?text=${encodeURIComponent(marker)}`);
  await until(page, 'only the two marked tasks to be listed', () => document.querySelectorAll('#tasks tbody tr[data-task-id]').length === 2);
  await page.goto(`${BASE}/ui/#/tasks?label=nobody-runs-this`);
  await until(page, 'the two labelled tasks to be listed', () => document.querySelectorAll('#tasks tbody tr[data-task-id]').length === 2);
  for (const task of waiting) await page.check(`tr[data-task-id="${task.id}"] input[type=checkbox]`);
  await page.click('#cancel-selected');
  for (const task of waiting) {
    await until(page, `task ${task.id} to show cancelled`, (id) => !!document.querySelector(`tr[data-task-id="${id}"] [data-status="cancelled"]`), task.id);
  }
});

await scenario('runners, queues and schedules show the cluster', async () => {
  await api('POST', '/v1/schedules', { name: 'nightly-report', cron: '0 3 * * *', task: { command: ['true'] } });
  await page.goto(`${BASE}/ui/#/runners`);
  await until(page, 'both runners to be listed', () => document.querySelectorAll('#runners tr[data-runner-id]').length === 2);
  await until(page, 'pause buttons for an admin', () => document.querySelectorAll('#runners [data-action="pause"]').length === 2);
  await until(page, 'the provisioner, with its demand', () => document.querySelector('#provisioners tr[data-provisioner="on-demand"]')?.textContent.includes('command'));
  await screenshot(page, 'runners');
  await page.goto(`${BASE}/ui/#/queues`);
  await until(page, 'the default queue', () => !!document.querySelector('#queues tr[data-queue="default"]'));
  await screenshot(page, 'queues');
  // Next fires and last runs come with the list: the page reads no schedule's details
  // (it read up to 100 of them every 10 s).
  const detailReads = [];
  const countDetails = (request) => {
    if (/^\/v1\/schedules\/[0-9a-f-]{36}$/.test(new URL(request.url()).pathname)) detailReads.push(request.url());
  };
  page.on('request', countDetails);
  await page.goto(`${BASE}/ui/#/schedules`);
  await until(page, 'the schedule and its next fires', () => /nightly-report/.test(document.querySelector('#schedules tbody')?.textContent ?? '') && document.querySelectorAll('#schedules ul.times li').length >= 3);
  await page.click('#schedules [data-action="trigger"]');
  await until(page, "the triggered run among its last runs", () => !!document.querySelector('#schedules a[href^="#/tasks/"]'));
  page.off('request', countDetails);
  if (detailReads.length) throw new Error(`the schedules page read details: ${detailReads.join(', ')}`);
  await screenshot(page, 'schedules');
});

await scenario("a killed node's claims are adopted, as the nodes page shows", async () => {
  await page.goto(`${BASE}/ui/#/nodes`);
  const claims = (id) => `#nodes tr[data-node-id="${id}"] .claims`;
  await until(page, `${DOOMED} to hold the held task's claim`, (sel) => document.querySelector(sel)?.textContent === '1', claims(DOOMED));
  await until(page, `${SURVIVOR} to be listed`, (sel) => !!document.querySelector(sel), claims(SURVIVOR));
  await screenshot(page, 'nodes-before');
  await askTheTest(`kill ${DOOMED}`, 'killed');
  await until(page, `${DOOMED} to be shown lost`, (id) => ['lost', 'adopted'].includes(document.querySelector(`#nodes tr[data-node-id="${id}"]`)?.dataset.state), DOOMED);
  await until(page, `${SURVIVOR} to hold the adopted claim`, (sel) => document.querySelector(sel)?.textContent === '1', claims(SURVIVOR));
  // With the event stream, the page names the adopter.
  await until(page, `${DOOMED} to be shown adopted by ${SURVIVOR}`, ([id, by]) => {
    const row = document.querySelector(`#nodes tr[data-node-id="${id}"]`);
    return row?.dataset.state === 'adopted' && row.textContent.includes(by);
  }, [DOOMED, SURVIVOR]);
  await screenshot(page, 'nodes');
  const held = await api('GET', `/v1/tasks/${HELD_TASK}`);
  if (held.status !== 'running') throw new Error(`the held task is ${held.status}, not running`);
});

// --- Finding a task ---------------------------------------------------------------------

await scenario('a bad task id in the address gets a message, and nothing is asked again and again', async () => {
  const unknown = '00000000-0000-7000-8000-000000000000';
  const asked = [];
  const record = (request) => {
    if (request.url().includes('not-a-uuid') || request.url().includes(unknown)) asked.push(request.url());
  };
  page.on('request', record);
  await page.goto(`${BASE}/ui/#/tasks/not-a-uuid`);
  await until(page, 'the page to say the id is not a task id', () => /not-a-uuid is not a task id/.test(document.querySelector('#task-missing')?.textContent ?? ''));
  await screenshot(page, 'task-bad-id');
  // A task id that is well formed but names no task: the server's 404, in words.
  await page.goto(`${BASE}/ui/#/tasks/${unknown}`);
  await until(page, 'the page to say no task has that id', (id) => (document.querySelector('#task-missing')?.textContent ?? '').includes(`No task has the id ${id}`), unknown);
  // Moving on shows whether anything kept asking about them meanwhile.
  await page.goto(`${BASE}/ui/#/queues`);
  await page.locator('#queues').waitFor({ timeout: SHOWS_WITHIN });
  await until(page, 'the queues page to read its data', () => !!document.querySelector('#queues tbody tr'));
  page.off('request', record);
  if (asked.some((url) => url.includes('not-a-uuid'))) throw new Error(`the console asked the server about not-a-uuid: ${asked.join(', ')}`);
  const unknownAsks = asked.filter((url) => url.includes(unknown));
  if (unknownAsks.length !== 1 || /events/.test(unknownAsks[0])) throw new Error(`asked about the unknown id: ${unknownAsks.join(', ')}`);
});

await scenario('a short id that matches several tasks offers each', async () => {
  // Two tasks sharing a short id cannot be made on purpose: the server's 409 is played.
  const short = 'abcdefabcdef';
  const ids = ['01900000-0000-7000-8000-abcdefabcdef', '01910000-0000-7000-9000-abcdefabcdef'];
  await page.route(`${BASE}/v1/tasks/${short}`, (route) =>
    route.fulfill({ status: 409, contentType: 'application/json', body: JSON.stringify({ error: { code: 'ambiguous_id', message: `short id ${short} names several tasks (${ids.join(', ')}): use the whole id` } }) }),
  );
  try {
    await page.goto(`${BASE}/ui/#/tasks/${short}`);
    await until(page, 'both tasks offered', (ids) => ids.every((id) => !!document.querySelector(`#task-missing a[href="#/tasks/${id}"]`)), ids);
    const text = await page.evaluate(textOf, '#task-missing');
    if (!/matches more than one task/.test(text) || text.includes('ambiguous_id')) throw new Error(`the message: ${text}`);
  } finally {
    await page.unroute(`${BASE}/v1/tasks/${short}`);
  }
});

await scenario('the search box opens a task by its whole or short id, and / goes to it', async () => {
  const task = await submit({ command: ['echo', 'found by its id'] });
  const short = task.id.slice(-12);
  await page.goto(`${BASE}/ui/#/tasks`);
  await page.locator('#tasks').waitFor({ timeout: SHOWS_WITHIN });
  // `/` in a field types a slash; elsewhere it moves to the search box.
  await page.click('input[name=queue]');
  await page.keyboard.type('a/b');
  if ((await page.inputValue('input[name=queue]')) !== 'a/b') throw new Error('/ was taken from a field being typed in');
  await page.click('h1');
  await page.keyboard.press('/');
  await until(page, 'the search box to have the focus', () => document.activeElement?.id === 'find-task-input');
  await page.keyboard.type(short);
  await page.keyboard.press('Enter');
  await until(page, 'the task the short id names', (id) => (document.querySelector('[data-field="id"]')?.textContent ?? '') === id, task.id);
  await until(page, 'the address to hold the whole id', (id) => location.hash === `#/tasks/${id}`, task.id);
  await page.fill('#find-task-input', task.id.toUpperCase());
  await page.press('#find-task-input', 'Enter');
  await until(page, 'the task the whole id names', (id) => location.hash === `#/tasks/${id}` && document.querySelector('[data-field="id"]')?.textContent === id, task.id);
  await page.fill('#find-task-input', 'found by its');
  await page.press('#find-task-input', 'Enter');
  await until(page, 'tasks whose command holds the text', (id) => location.hash.startsWith('#/tasks?text=') && !!document.querySelector(`#tasks tr[data-task-id="${id}"]`), task.id);
});

// --- The list: a total, sorting, dates, order --------------------------------------------

await scenario('the list says how many match in all, sorts by a heading, and filters by date', async () => {
  const queue = `count-${randomUUID().slice(0, 8)}`;
  const batch = (n, tag) => api('POST', '/v1/tasks/batch', { tasks: Array.from({ length: n }, (_, i) => ({ queue, labels: ['nobody-runs-this'], priority: i % 3, command: ['echo', `${tag}-${i}`] })) });
  const first = (await batch(55, 'first')).tasks;
  const second = (await batch(5, 'second')).tasks;
  try {
    await page.goto(`${BASE}/ui/#/tasks?queue=${queue}`);
    await until(page, 'a page of 50 and the total of 60', () => document.querySelectorAll('#tasks tbody tr[data-task-id]').length === 50 && /50 shown of 60 tasks/.test(document.getElementById('task-count')?.textContent ?? ''));
    const createdShown = () => [...document.querySelectorAll('#tasks tbody tr[data-task-id] td[data-created]')].map((td) => td.dataset.created);
    const inOrder = (list, descending) => list.every((v, i) => i === 0 || (descending ? list[i - 1] >= v : list[i - 1] <= v));
    await page.click('#tasks th[data-column="created"] button');
    await until(page, 'the rows oldest first', () => document.querySelector('#tasks th[data-column="created"]')?.getAttribute('aria-sort') === 'ascending');
    if (!inOrder(await page.evaluate(createdShown), false)) throw new Error('not sorted by creation, ascending');
    await page.click('#tasks th[data-column="created"] button');
    await until(page, 'the rows newest first', () => document.querySelector('#tasks th[data-column="created"]')?.getAttribute('aria-sort') === 'descending');
    if (!inOrder(await page.evaluate(createdShown), true)) throw new Error('not sorted by creation, descending');
    await page.click('#tasks th[data-column="command"] button');
    const commands = await page.evaluate(() => [...document.querySelectorAll('#tasks tbody td.command')].map((td) => td.textContent));
    const sorted = [...commands].sort((a, b) => a.localeCompare(b, undefined, { numeric: true, sensitivity: 'base' }));
    if (commands.join('|') !== sorted.join('|')) throw new Error(`not sorted by command: ${commands.slice(0, 5).join(', ')}…`);
    if (!page.url().includes('sort=command')) throw new Error(`the address does not keep the order: ${page.url()}`);
    await screenshot(page, 'tasks-sorted');

    // Oldest first, from the server: the first task of the first batch leads.
    await page.goto(`${BASE}/ui/#/tasks?queue=${queue}&order=oldest`);
    await until(page, 'the oldest task first', (id) => document.querySelector('#tasks tbody tr[data-task-id]')?.dataset.taskId === id, first[0].id);

    // Created at or after the second batch's first task: that batch alone.
    const after = second[0].created_at;
    await page.goto(`${BASE}/ui/#/tasks?queue=${queue}&created_after=${encodeURIComponent(after)}`);
    await until(page, 'the second batch alone', (ids) => {
      const shown = [...document.querySelectorAll('#tasks tbody tr[data-task-id]')].map((tr) => tr.dataset.taskId).sort();
      return shown.join() === [...ids].sort().join() && /^5 tasks$/.test(document.getElementById('task-count')?.textContent ?? '');
    }, second.map((t) => t.id));
    if (!(await page.inputValue('input[name=created_after]'))) throw new Error('the date field does not show the filter');
    // The form: created before a local minute well before now takes none of them.
    await page.fill('input[name=created_after]', '');
    await page.fill('input[name=created_before]', '2001-01-01T00:00');
    await page.click('#task-filters button[type=submit]');
    await until(page, 'no task created before 2001', () => /created_before=2001-01-01T/.test(location.hash) && !!document.querySelector('#tasks td.empty'));
  } finally {
    await api('POST', '/v1/tasks/cancel', { queue, limit: 100 });
  }
});

// --- Logs ----------------------------------------------------------------------------------

let loggedTask = null;

await scenario('a log is searched, linked to by line and downloaded', async () => {
  const script = [
    'i=1; while [ $i -le 40 ]; do echo "line $i"; i=$((i+1)); done',
    'echo "Find me once"',
    'echo "find ME twice, on stderr" >&2',
    'echo done',
  ].join('\n');
  loggedTask = await submit({ script });
  await ended(loggedTask.id);
  await page.goto(`${BASE}/ui/#/tasks/${loggedTask.id}`);
  await until(page, 'the whole log', () => /end of log/.test(document.getElementById('log-state')?.textContent ?? '') && document.querySelectorAll('#log .line').length === 43);
  await page.fill('#log-search', 'find me');
  await until(page, 'two matches, the first current', () => document.getElementById('log-search-count')?.textContent === '1 of 2' && !!document.querySelector('#log .line.current-match'));
  const painted = await page.evaluate(() => CSS.highlights.get('log-match')?.size);
  if (painted !== 2) throw new Error(`${painted} matches highlighted`);
  // The two lines go to stdout and stderr, whose order in the log is the runner's: the
  // test follows whichever comes first.
  const currentLine = () => document.querySelector('#log .line.current-match')?.dataset.line;
  const first = await page.evaluate(currentLine);
  await page.press('#log-search', 'Enter');
  await until(page, 'the second match current', (first) => {
    const line = document.querySelector('#log .line.current-match');
    return document.getElementById('log-search-count')?.textContent === '2 of 2' && line?.dataset.line !== first && /find me/i.test(line.textContent);
  }, first);
  await page.click('#log-search-previous');
  await until(page, 'the first match current again', (first) => document.getElementById('log-search-count')?.textContent === '1 of 2' && document.querySelector('#log .line.current-match')?.dataset.line === first, first);
  await screenshot(page, 'log-search');
  await page.fill('#log-search', 'no such text');
  await until(page, 'no match', () => document.getElementById('log-search-count')?.textContent === 'no match');

  // A line's number is a link to it.
  await page.click('#log .line[data-line="7"] a.ln');
  await until(page, 'line 7 marked, and the address pointing at it', (id) => location.hash === `#/tasks/${id}?attempt=1&line=7` && !!document.querySelector('#log .line.target[data-line="7"]'), loggedTask.id);
  // The link, opened afresh, scrolls to its line (the one saying "line 38").
  const n = await page.evaluate(() => [...document.querySelectorAll('#log .line')].find((l) => l.querySelector('.text').textContent === 'line 38')?.dataset.line);
  await page.goto(`${BASE}/ui/#/queues`);
  await page.goto(`${BASE}/ui/#/tasks/${loggedTask.id}?attempt=1&line=${n}`);
  await until(page, 'line 38 marked and scrolled to', (n) => {
    const line = document.querySelector(`#log .line.target[data-line="${n}"]`);
    const log = document.getElementById('log');
    if (!line || !log) return false;
    const [l, b] = [line.getBoundingClientRect(), log.getBoundingClientRect()];
    return /line 38/.test(line.textContent) && l.top >= b.top && l.bottom <= b.bottom;
  }, n);
  // Copying the log copies its text, not its line numbers.
  const text = await page.evaluate(textOf, '#log');
  if (!text.includes('line 1line 2line 3')) throw new Error(`the log's text starts ${JSON.stringify(text.slice(0, 30))}`);

  const [download] = await Promise.all([page.waitForEvent('download', { timeout: SHOWS_WITHIN }), page.click('#log-download')]);
  const saved = readFileSync(await download.path());
  const raw = await rawLog(loggedTask.id, 1);
  if (!saved.equals(raw)) throw new Error(`the download (${saved.length} bytes) is not the log (${raw.length} bytes)`);
  if (download.suggestedFilename() !== `task-${loggedTask.id.slice(-12)}-attempt-1.log`) throw new Error(`saved as ${download.suggestedFilename()}`);
});

await scenario('each log line has its time, and stderr lines stand apart', async () => {
  if (!loggedTask) throw new Error('the log scenario made no task');
  await page.goto(`${BASE}/ui/#/tasks/${loggedTask.id}`);
  await until(page, 'times beside the lines', () => document.getElementById('log')?.classList.contains('has-times') && /^\d\d:\d\d:\d\d\.\d{3}$/.test(document.querySelector('#log .line .ts')?.dataset.at ?? ''));
  await until(page, 'the stderr line marked', () => {
    const stderr = [...document.querySelectorAll('#log .line.stderr')].map((l) => l.textContent);
    return stderr.length === 1 && /twice/.test(stderr[0]);
  });
  const shown = await page.evaluate(() => getComputedStyle(document.querySelector('#log .line .ts')).display);
  if (shown === 'none') throw new Error('the times are not shown');
  await page.evaluate(() => document.querySelector('#log .line.stderr').scrollIntoView({ block: 'center' }));
  await screenshot(page, 'log-times');
});

// --- A task's attempts ---------------------------------------------------------------------

await scenario("a task's attempts are listed, each with its exit code, and a running one's time counts", async () => {
  const task = await submit({ script: 'echo "attempt $BATON_ATTEMPT"; exit 3', max_attempts: 2, retry: { backoff_base_s: 0.2 } });
  await ended(task.id);
  await page.goto(`${BASE}/ui/#/tasks/${task.id}`);
  await until(page, 'two attempts, both exit code 3', () => {
    const rows = [...document.querySelectorAll('#attempt-history tbody tr[data-attempt]')];
    return rows.length === 2 && rows.every((r) => r.querySelector('.exit-code')?.textContent === '3');
  });
  await until(page, 'the last attempt shown as failed, the first as retried', () => {
    const [first, second] = document.querySelectorAll('#attempt-history tbody tr[data-attempt]');
    return /retried/.test(first.textContent) && second.dataset.endedAs === 'failed';
  });
  await page.click('#attempt-history tr[data-attempt="1"] button[data-log]');
  await until(page, "attempt 1's log shown", () => document.querySelector('#attempts button.current')?.dataset.attempt === '1' && document.querySelector('#attempt-history tr.shown')?.dataset.attempt === '1');
  await screenshot(page, 'task-attempts');

  const running = await submit({ command: ['sleep', '300'] });
  try {
    await page.goto(`${BASE}/ui/#/tasks/${running.id}`);
    await until(page, 'the running attempt', () => !!document.querySelector('#attempt-history [data-running-since]'), undefined, RUNS_WITHIN);
    const before = await page.evaluate(textOf, '#attempt-history [data-running-since]');
    await until(page, 'its time to count on', (before) => {
      const now = document.querySelector('#attempt-history [data-running-since]')?.textContent;
      return now && now !== before && !!document.getElementById('running-for')?.textContent;
    }, before);
  } finally {
    await api('POST', `/v1/tasks/${running.id}/cancel`);
  }
});

// --- Making things from the console --------------------------------------------------------

await scenario('a task is submitted from the console, and a refused one says why', async () => {
  await page.goto(`${BASE}/ui/#/tasks`);
  await page.click('#new-task');
  await page.locator('#new-task-form').waitFor({ timeout: SHOWS_WITHIN });
  // Said wrong: the form says so, and asks nothing.
  await page.fill('#task-command', `sh -c 'echo unclosed`);
  await until(page, 'the words preview to say the quote is open', () => /not closed/.test(document.getElementById('task-words')?.textContent ?? ''));
  await page.click('#submit-task');
  await until(page, 'the command field to say what is wrong', () => /single quote is not closed/.test(document.querySelector('[data-error-for="command"]:not([hidden])')?.textContent ?? ''));
  // Refused by the server: its reason beside the button and under the field.
  await page.fill('#task-command', `sh -c 'echo "made in the console: $WHO"'`);
  await until(page, 'three words', () => (document.getElementById('task-words')?.textContent ?? '').startsWith('3 words'));
  await page.fill('#task-queue', 'Not A Queue');
  await page.click('#submit-task');
  await until(page, 'the refusal beside the button', () => /Not submitted: queue/.test(document.querySelector('#new-task-error:not([hidden])')?.textContent ?? ''));
  await until(page, 'and under the queue field', () => !!document.querySelector('[data-error-for="queue"]:not([hidden])'));
  await screenshot(page, 'new-task-refused');
  await page.fill('#task-queue', '');
  await page.fill('#task-env', 'WHO=the browser');
  await page.fill('#task-max_attempts', '2');
  await page.fill('#task-labels', '');
  await page.click('#submit-task');
  await until(page, "the new task's page", () => /^#\/tasks\/[0-9a-f-]{36}$/.test(location.hash));
  const id = await page.evaluate(() => location.hash.slice('#/tasks/'.length));
  await until(page, 'its output', () => /made in the console: the browser/.test(document.getElementById('log')?.textContent ?? ''), undefined, RUNS_WITHIN);
  const task = await api('GET', `/v1/tasks/${id}`);
  if (JSON.stringify(task.command) !== JSON.stringify(['sh', '-c', 'echo "made in the console: $WHO"']) || task.env.WHO !== 'the browser' || task.max_attempts !== 2) {
    throw new Error(`submitted as ${JSON.stringify({ command: task.command, env: task.env, max_attempts: task.max_attempts })}`);
  }
});

await scenario('a schedule is made, changed and deleted from the console, its cron said in words', async () => {
  const name = `console-${randomUUID().slice(0, 8)}`;
  await page.goto(`${BASE}/ui/#/schedules`);
  await page.click('#new-schedule');
  await page.locator('#schedule-form').waitFor({ timeout: SHOWS_WITHIN });
  await page.fill('#schedule-name', name);
  await page.fill('#schedule-cron', '61 * * * *');
  await until(page, 'the cron field to say 61 is no minute', () => /minute: 61 is out of range/.test(document.getElementById('cron-words')?.textContent ?? ''));
  await page.fill('#schedule-cron', '0 9 * * MON-FRI');
  await until(page, 'the cron said in words', () => document.getElementById('cron-words')?.textContent === 'At 09:00, on Monday through Friday');
  await page.fill('#template-command', 'echo from a schedule');
  // A zone the server does not know: refused, and said under the zone.
  await page.fill('#schedule-timezone', 'Mars/Olympus');
  await page.click('#save-schedule');
  await until(page, 'the zone refused', () => /Not saved: timezone/.test(document.querySelector('#schedule-error:not([hidden])')?.textContent ?? '') && !!document.querySelector('[data-error-for="timezone"]:not([hidden])'));
  await screenshot(page, 'schedule-refused');
  await page.fill('#schedule-timezone', 'Europe/Berlin');
  await page.click('#save-schedule');
  await until(page, 'the schedule listed', (name) => location.hash === '#/schedules' && !!document.querySelector(`#schedules tbody`)?.textContent.includes(name), name);
  const made = (await api('GET', '/v1/schedules')).schedules.find((s) => s.name === name);
  if (!made || made.cron !== '0 9 * * MON-FRI' || made.timezone !== 'Europe/Berlin' || made.task.command.join(' ') !== 'echo from a schedule') throw new Error(`made as ${JSON.stringify(made)}`);
  await until(page, 'its row to say the cron in words', (id) => /At 09:00, on Monday through Friday/.test(document.querySelector(`#schedules tr[data-schedule-id="${id}"] .cron-said`)?.textContent ?? ''), made.id);

  // Changing it keeps what the form does not show (here, the template's payload).
  await api('PATCH', `/v1/schedules/${made.id}`, { task: { ...made.task, payload: { kept: true } } });
  await page.click(`#schedules tr[data-schedule-id="${made.id}"] [data-action="edit"]`);
  await until(page, 'the form filled', () => document.getElementById('schedule-cron')?.value === '0 9 * * MON-FRI' && !!document.getElementById('next-ticks'));
  await screenshot(page, 'schedule-form');
  await page.fill('#schedule-cron', '30 6 1 1 *');
  await until(page, 'the new cron said', () => document.getElementById('cron-words')?.textContent === 'At 06:30, on day 1 of the month, in January');
  await page.fill('#template-command', `sh -c 'echo changed'`);
  await page.click('#save-schedule');
  await until(page, 'back on the list', () => location.hash === '#/schedules');
  const changed = await api('GET', `/v1/schedules/${made.id}`);
  if (changed.cron !== '30 6 1 1 *' || changed.task.command.join(' ') !== 'sh -c echo changed' || changed.task.payload?.kept !== true) throw new Error(`changed to ${JSON.stringify(changed)}`);

  page.once('dialog', (dialog) => dialog.accept());
  await page.goto(`${BASE}/ui/#/schedules/${made.id}`);
  await page.locator('#delete-schedule').waitFor({ timeout: SHOWS_WITHIN });
  await page.click('#delete-schedule');
  await until(page, 'the schedule gone from the list', (id) => location.hash === '#/schedules' && !!document.querySelector('#schedules tbody tr') && !document.querySelector(`#schedules tr[data-schedule-id="${id}"]`), made.id);
  const gone = await fetch(`${BASE}/v1/schedules/${made.id}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  if (gone.status !== 404) throw new Error(`the deleted schedule answers ${gone.status}`);
});

// --- Pipelines -----------------------------------------------------------------------------

/// The pipelines the scenarios below made: one that ended (after a re-run), one cancelled.
let shownPipeline = null;
let cancelledPipeline = null;

/// What a pipeline's graph shows: each job's status and layer, and its edges (run in the page).
const graphShown = () => ({
  jobs: Object.fromEntries([...document.querySelectorAll('#pipeline-graph a.job')].map((a) => [a.dataset.job, { status: a.dataset.status, layer: Number(a.dataset.layer), x: Number(a.querySelector('rect').getAttribute('x')) }])),
  edges: [...document.querySelectorAll('#pipeline-graph path.edge')].map((p) => `${p.dataset.from}>${p.dataset.to}`).sort(),
});

/// Waits until the graph shows each job of `want` (`{ job: status }`) in its status.
const graphSays = (what, want, timeout = SHOWS_WITHIN) =>
  until(page, what, (want) => Object.entries(want).every(([job, status]) => document.querySelector(`#pipeline-graph a.job[data-job="${job}"]`)?.dataset.status === status), want, timeout);

await scenario("a pipeline's graph shows each job's status and needs as they run, and a failed job is re-run", async () => {
  const gate = join(SHARED_DIR, `baton-ui-pipeline-gate-${randomUUID()}`);
  const name = `console-${randomUUID().slice(0, 8)}`;
  const job = (jobName, needs = [], more = {}) => ({ name: jobName, needs, command: ['true'], ...more });
  // A diamond (build → lint, test → package), and beside it a job that fails until the
  // gate is opened, what it skips (deploy) and what runs whatever its end (report).
  const jobs = [
    job('build'),
    job('lint', ['build']),
    job('test', ['build']),
    job('package', ['lint', 'test']),
    job('flaky', ['build'], { command: undefined, script: 'test -e "$GATE"', env: { GATE: gate }, max_attempts: 1 }),
    job('deploy', ['flaky']),
    job('report', ['flaky'], { when: 'always' }),
  ];
  const edges = jobs.flatMap((j) => j.needs.map((n) => `${n}>${j.name}`)).sort();
  const layers = { build: 0, lint: 1, test: 1, flaky: 1, package: 2, deploy: 2, report: 2 };
  const first = { build: 'succeeded', lint: 'succeeded', test: 'succeeded', package: 'succeeded', flaky: 'failed', deploy: 'skipped', report: 'succeeded' };

  // The list, open before the pipeline exists: it comes, and ends, without a reload.
  await page.goto(`${BASE}/ui/#/pipelines`);
  await page.locator('#pipelines').waitFor({ timeout: SHOWS_WITHIN });
  await until(page, 'the event stream to be live', () => document.getElementById('live')?.dataset.state === 'live');
  await page.evaluate(() => {
    window.sameDocument = true;
  });
  shownPipeline = await api('POST', '/v1/pipelines', { name, jobs });
  const row = `#pipelines tr[data-pipeline-id="${shownPipeline.id}"]`;
  await until(page, 'the pipeline listed with its 7 jobs', ([row, name]) => document.querySelector(`${row} .name`)?.textContent.includes(name) && document.querySelector(`${row} .jobs`)?.textContent === '7', [row, name]);
  await until(page, 'the pipeline failed, its jobs counted by status', (row) => {
    const badges = [...document.querySelectorAll(`${row} .counts [data-status]`)].map((b) => b.textContent);
    return document.querySelector(row)?.dataset.status === 'failed' && badges.join(',') === '5 succeeded,1 failed,1 skipped';
  }, row, RUNS_WITHIN);
  if (!(await page.evaluate(() => window.sameDocument === true))) throw new Error('the list was reloaded');
  await screenshot(page, 'pipelines');

  await page.click(`${row} .name a`);
  await graphSays('every job in its status', first);
  const shown = await page.evaluate(graphShown);
  if (Object.keys(shown.jobs).length !== 7) throw new Error(`the graph has ${Object.keys(shown.jobs).join(', ')}`);
  const misplaced = Object.entries(layers).filter(([n, layer]) => shown.jobs[n].layer !== layer);
  if (misplaced.length) throw new Error(`in the wrong layer: ${misplaced.map(([n]) => n).join(', ')}`);
  if (shown.edges.join() !== edges.join()) throw new Error(`edges ${shown.edges.join(', ')}, not ${edges.join(', ')}`);
  const boxes = shown.jobs;
  if (!(boxes.build.x < boxes.lint.x && boxes.lint.x === boxes.flaky.x && boxes.lint.x < boxes.package.x && boxes.package.x === boxes.deploy.x)) throw new Error(`columns: ${JSON.stringify(boxes)}`);
  const rule = await page.getAttribute('#pipeline-graph path.edge[data-to="report"]', 'class');
  if (!rule.includes('edge-always')) throw new Error(`the edge to report is drawn as ${rule}`);
  const why = 'skipped: a job it needs did not succeed';
  const tooltip = await page.evaluate(() => document.querySelector('#pipeline-graph a.job[data-job="deploy"] title')?.textContent ?? '');
  if (!tooltip.includes(why)) throw new Error(`deploy's tooltip: ${tooltip}`);
  await until(page, "deploy's reason beside it", (why) => document.querySelector('#pipeline-jobs tr[data-job="deploy"] .job-error')?.textContent === why, why);
  if (await page.locator('#pipeline-jobs tr[data-job="deploy"] [data-action="retry"]').count()) throw new Error('a skipped job is offered a re-run');
  if (await page.locator('#cancel-pipeline').count()) throw new Error('an ended pipeline is offered a cancel');
  await until(page, 'the pipeline shown failed', () => !!document.querySelector('#pipeline-status [data-status="failed"]'));
  await screenshot(page, 'pipeline');

  // The failed job, re-run with its gate open: it succeeds, and what it skipped runs.
  writeFileSync(gate, '');
  try {
    await page.click('#pipeline-jobs tr[data-job="flaky"] [data-action="retry"]');
    await graphSays('flaky and then deploy succeeded', { flaky: 'succeeded', deploy: 'succeeded' }, RUNS_WITHIN);
    await until(page, 'the pipeline succeeded', () => !!document.querySelector('#pipeline-status [data-status="succeeded"]'));
  } finally {
    rmSync(gate, { force: true });
  }
  await until(page, 'flaky run twice', () => document.querySelector('#pipeline-jobs tr[data-job="flaky"] .runs')?.textContent === '2');
  if (await page.locator('#pipeline-jobs [data-action="retry"]').count()) throw new Error('a re-run is offered with no job left failed');

  // A box opens its task, whose page links back to the pipeline.
  await page.click('#pipeline-graph a.job[data-job="deploy"]');
  await until(page, "deploy's task, naming its pipeline and job", (id) => document.querySelector('#pipeline-link')?.getAttribute('href') === `#/pipelines/${id}` && document.querySelector('[data-field="pipeline"] .job-name')?.textContent === 'deploy', shownPipeline.id);
  await page.click('#pipeline-link');
  await until(page, 'back on the pipeline', (id) => location.hash === `#/pipelines/${id}` && !!document.querySelector('#pipeline-graph a.job'), shownPipeline.id);
});

await scenario('a running pipeline is cancelled from its page, its waiting job listed as waiting', async () => {
  cancelledPipeline = await api('POST', '/v1/pipelines', {
    name: `console-cancel-${randomUUID().slice(0, 8)}`,
    jobs: [
      { name: 'slow', command: ['sleep', '300'] },
      { name: 'after', needs: ['slow'], command: ['true'] },
    ],
  });
  const after = cancelledPipeline.jobs.find((j) => j.name === 'after').task_id;
  try {
    await page.goto(`${BASE}/ui/#/pipelines/${cancelledPipeline.id}`);
    await graphSays('slow running and after waiting', { slow: 'running', after: 'waiting' }, RUNS_WITHIN);
    // The task list takes the new statuses as a filter.
    await page.goto(`${BASE}/ui/#/tasks?status=waiting`);
    await until(page, 'the waiting job listed as waiting', (id) => !!document.querySelector(`#tasks tr[data-task-id="${id}"] [data-status="waiting"]`), after);
    const offered = await page.evaluate(() => [...document.querySelectorAll('#task-filters select[name=status] option')].map((o) => o.value));
    if (!offered.includes('waiting') || !offered.includes('skipped')) throw new Error(`the status filter offers ${offered.join(', ')}`);

    await page.goto(`${BASE}/ui/#/pipelines/${cancelledPipeline.id}`);
    await page.locator('#cancel-pipeline').waitFor({ timeout: SHOWS_WITHIN });
    page.once('dialog', (dialog) => dialog.accept());
    await page.click('#cancel-pipeline');
    await graphSays('both jobs cancelled', { slow: 'cancelled', after: 'cancelled' }, RUNS_WITHIN);
    await until(page, 'the pipeline cancelled', () => !!document.querySelector('#pipeline-status [data-status="cancelled"]'));
    await until(page, 'no cancel offered, a re-run for each job', () => !document.getElementById('cancel-pipeline') && document.querySelectorAll('#pipeline-jobs [data-action="retry"]').length === 2);
    await screenshot(page, 'pipeline-cancelled');
  } finally {
    await api('POST', `/v1/pipelines/${cancelledPipeline.id}/cancel`).catch(() => {});
  }
});

// --- Queues --------------------------------------------------------------------------------

await scenario('a queue that is not paused is "active"', async () => {
  await page.goto(`${BASE}/ui/#/queues`);
  await until(page, 'the default queue active', () => document.querySelector('#queues tr[data-queue="default"] .state')?.textContent === 'active');
});

await scenario('the queues page charts the last hour of each queue', async () => {
  await page.goto(`${BASE}/ui/#/queues`);
  await until(page, "the default queue's charts", () => document.querySelectorAll('#queue-trends figure[data-queue="default"] svg.chart').length === 2);
  await until(page, 'tasks succeeded and failed in the last hour', () => {
    const row = document.querySelector('#queues tr[data-queue="default"]');
    return Number(row?.querySelector('.succeeded-hour')?.textContent) >= 3 && Number(row?.querySelector('.failed-hour')?.textContent) >= 1;
  });
  const bars = await page.evaluate(() => document.querySelectorAll('#queue-trends figure[data-queue="default"] rect.succeeded').length);
  if (bars < 1) throw new Error('no bar of succeeded tasks');
  await screenshot(page, 'queues-trends');
});

// --- A phone, and the dark ------------------------------------------------------------------

/// The main pages, each with what shows it is drawn.
const PAGES = () => [
  ['tasks', '#/tasks', '#tasks tbody tr[data-task-id]'],
  ['task', `#/tasks/${loggedTask?.id ?? HELD_TASK}`, '#log .line'],
  ['runners', '#/runners', '#runners tr[data-runner-id]'],
  ['nodes', '#/nodes', '#nodes tr[data-node-id]'],
  ['queues', '#/queues', '#queues tr[data-queue]'],
  ['schedules', '#/schedules', '#schedules tr[data-schedule-id]'],
  ['pipelines', '#/pipelines', '#pipelines tr[data-pipeline-id]'],
  ...(shownPipeline ? [['pipeline', `#/pipelines/${shownPipeline.id}`, '#pipeline-graph a.job']] : []),
  ['new-task', '#/tasks/new', '#new-task-form'],
  ['new-schedule', '#/schedules/new', '#schedule-form'],
];

await scenario('at 390 px every page fits, with every link of the header in reach', async () => {
  page = await newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  await signIn(page, TOKEN);
  await page.locator('#tasks').waitFor({ timeout: SHOWS_WITHIN });
  for (const [name, hash, drawn] of PAGES()) {
    await page.goto(`${BASE}/ui/${hash}`);
    await page.locator(drawn).first().waitFor({ timeout: SHOWS_WITHIN });
    const problems = await page.evaluate(() => {
      const found = [];
      const width = window.innerWidth;
      if (document.documentElement.scrollWidth > width) found.push(`the page is ${document.documentElement.scrollWidth} px wide`);
      const inView = (element) => {
        const r = element.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= width;
      };
      for (const link of [...document.querySelectorAll('#nav a:not([hidden])'), document.getElementById('sign-out'), document.getElementById('find-task-input')]) {
        if (!inView(link)) found.push(`${link.textContent || link.id} is out of reach`);
      }
      // Buttons a table holds scroll with it, in its own box; every other one is in view.
      for (const button of document.querySelectorAll('main button, main a.button')) {
        if (button.offsetParent === null || button.closest('.table-wrap')) continue;
        if (!inView(button)) found.push(`the button ${button.textContent} is off screen`);
      }
      for (const table of document.querySelectorAll('main table')) {
        const box = table.closest('.table-wrap');
        if (!box) found.push(`table #${table.id} has no box of its own`);
        else if (box.getBoundingClientRect().right > width) found.push(`table #${table.id}'s box is wider than the window`);
      }
      return found;
    });
    await screenshot(page, `narrow-${name}`);
    if (problems.length) throw new Error(`${name}: ${problems.join('; ')}`);
  }
});

await scenario('with a dark system theme the console is dark', async () => {
  const luminance = () => {
    const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/\d+/g).map(Number);
    const [fr, fg, fb] = getComputedStyle(document.body).color.match(/\d+/g).map(Number);
    return { background: (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255, text: (0.2126 * fr + 0.7152 * fg + 0.0722 * fb) / 255 };
  };
  const lightPage = await newPage({ colorScheme: 'light' });
  const light = await lightPage.evaluate(luminance);
  await lightPage.context().close();
  if (!(light.background > 0.8)) throw new Error(`the light theme's background has luminance ${light.background}`);
  page = await newPage({ colorScheme: 'dark' });
  await signIn(page, TOKEN);
  await page.locator('#tasks').waitFor({ timeout: SHOWS_WITHIN });
  for (const [name, hash, drawn] of PAGES()) {
    await page.goto(`${BASE}/ui/${hash}`);
    await page.locator(drawn).first().waitFor({ timeout: SHOWS_WITHIN });
    const dark = await page.evaluate(luminance);
    if (!(dark.background < 0.15 && dark.text > 0.7)) throw new Error(`${name}: background ${dark.background.toFixed(2)}, text ${dark.text.toFixed(2)}`);
    await screenshot(page, `dark-${name}`);
  }
});

await scenario('a read-only token sees no buttons', async () => {
  const reader = await api('POST', '/v1/tokens', { name: 'console-reader', scopes: ['read'] });
  page = await newPage();
  await signIn(page, reader.token);
  await page.locator('#tasks tbody tr[data-task-id]').first().waitFor({ timeout: SHOWS_WITHIN });
  await until(page, 'the header to show the read scope', () => document.body.dataset.scopes === 'read');
  // A heading's sort button changes nothing but the order shown.
  const visibleButtons = () => [...document.querySelectorAll('main button:not(.sort), main input[type=checkbox]')].filter((b) => b.offsetParent !== null).map((b) => b.textContent || b.type);
  const onTasks = await page.evaluate(visibleButtons);
  if (onTasks.some((b) => b !== 'Filter' && b !== 'Load more')) throw new Error(`tasks page shows ${onTasks.join(', ')}`);
  if (await page.locator('#new-task').count()) throw new Error('a read-only token is offered New task');
  await page.goto(`${BASE}/ui/#/tasks/${HELD_TASK}`);
  await until(page, 'the held task', () => !!document.querySelector('.page-head [data-status]'));
  if (await page.locator('#cancel').count()) throw new Error('a read-only token sees Cancel');
  for (const table of ['runners', 'queues', 'schedules', 'pipelines']) {
    await page.goto(`${BASE}/ui/#/${table}`);
    await until(page, `the ${table} page`, (id) => !!document.querySelector(`#${id} tbody tr`), table);
    const buttons = await page.evaluate(visibleButtons);
    if (buttons.length) throw new Error(`${table} page shows ${buttons.join(', ')}`);
  }
  if (await page.locator('#new-schedule, [data-action="edit"]').count()) throw new Error('a read-only token is offered to make or change schedules');
  if (cancelledPipeline) {
    await page.goto(`${BASE}/ui/#/pipelines/${cancelledPipeline.id}`);
    await until(page, 'the cancelled pipeline', () => !!document.querySelector('#pipeline-jobs tr[data-job] [data-status="cancelled"]'));
    const buttons = await page.evaluate(visibleButtons);
    if (buttons.length) throw new Error(`the pipeline page shows ${buttons.join(', ')}`);
  }
});

await scenario('no page had an uncaught error or a refused resource', async () => {
  if (pageProblems.length) throw new Error(pageProblems.join('; '));
});

await browser.close();
const passed = results.filter(Boolean).length;
console.log(`${passed} passed, ${results.length - passed} failed`);
process.exit(passed === results.length ? 0 : 1);
