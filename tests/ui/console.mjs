// The console in Chromium, scenario by scenario, against the cluster tests/ui.rs
// started. Every wait polls with a deadline; none sleeps for a fixed time. Prints one
// line per scenario and `N passed, M failed` last; exits non-zero if any failed.
//
// Talks to tests/ui.rs on stdin/stdout: prints `kill <node id>` and waits for `killed`.

import { chromium } from 'playwright-core';
import { createInterface } from 'node:readline';
import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
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

// ---------------------------------------------------------------------------------------

mkdirSync(SCREENSHOTS, { recursive: true });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
/// What went wrong inside any page: uncaught exceptions and refused content (CSP).
const pageProblems = [];

async function newPage() {
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
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

await scenario('a read-only token sees no buttons', async () => {
  const reader = await api('POST', '/v1/tokens', { name: 'console-reader', scopes: ['read'] });
  page = await newPage();
  await signIn(page, reader.token);
  await page.locator('#tasks tbody tr[data-task-id]').first().waitFor({ timeout: SHOWS_WITHIN });
  await until(page, 'the header to show the read scope', () => document.body.dataset.scopes === 'read');
  const visibleButtons = () => [...document.querySelectorAll('main button, main input[type=checkbox]')].filter((b) => b.offsetParent !== null).map((b) => b.textContent || b.type);
  const onTasks = await page.evaluate(visibleButtons);
  if (onTasks.some((b) => b !== 'Filter' && b !== 'Load more')) throw new Error(`tasks page shows ${onTasks.join(', ')}`);
  await page.goto(`${BASE}/ui/#/tasks/${HELD_TASK}`);
  await until(page, 'the held task', () => !!document.querySelector('.page-head [data-status]'));
  if (await page.locator('#cancel').count()) throw new Error('a read-only token sees Cancel');
  for (const table of ['runners', 'queues', 'schedules']) {
    await page.goto(`${BASE}/ui/#/${table}`);
    await until(page, `the ${table} page`, (id) => !!document.querySelector(`#${id} tbody tr`), table);
    const buttons = await page.evaluate(visibleButtons);
    if (buttons.length) throw new Error(`${table} page shows ${buttons.join(', ')}`);
  }
});

await scenario('no page had an uncaught error or a refused resource', async () => {
  if (pageProblems.length) throw new Error(pageProblems.join('; '));
});

await browser.close();
const passed = results.filter(Boolean).length;
console.log(`${passed} passed, ${results.length - passed} failed`);
process.exit(passed === results.length ? 0 : 1);
