// The console's shell: sign-in, the header, and hash routes to one page at a time.
//
//   #/tasks?status=&queue=&label=&schedule=&text=&created_after=&created_before=&order=
//                                                    the task list, filtered
//   #/tasks/<id>?attempt=&line=                      one task (whole or short id), its log
//   #/tasks/new                                      submit a task
//   #/pipelines  #/pipelines/<id>                    pipelines, one pipeline's graph
//   #/schedules/new  #/schedules/<id>                make a schedule, change or delete one
//   #/runners  #/nodes  #/queues  #/schedules
//
// Each page module exports `mount(main, context, route)` and returns a function that
// stops whatever it started (event streams, log follows, timers) when the user leaves.

import { whenRefused } from './api.js';
import { describe, probe } from './access.js';
import { fill, h } from './dom.js';
import { onStateChange } from './events.js';
import { findTask } from './find_task.js';
import { forget, remember, token } from './session.js';
import * as signIn from './pages/sign_in.js';
import * as tasks from './pages/tasks.js';
import * as task from './pages/task.js';
import * as newTask from './pages/new_task.js';
import * as scheduleForm from './pages/schedule_form.js';
import * as runners from './pages/runners.js';
import * as nodes from './pages/nodes.js';
import * as queues from './pages/queues.js';
import * as schedules from './pages/schedules.js';
import * as pipelines from './pages/pipelines.js';
import * as pipeline from './pages/pipeline.js';

const PAGES = { tasks, pipelines, runners, nodes, queues, schedules };
/// Pages only a token with `read` may see (the API would refuse the rest their data).
const NEEDS_READ = new Set(['runners', 'nodes', 'queues']);

const main = document.getElementById('main');
let context = null;
let unmount = () => {};

/// `#/tasks/abc?x=1` → { page: 'tasks', id: 'abc', query: URLSearchParams }.
function currentRoute() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path, search = ''] = hash.split('?', 2);
  const [page = 'tasks', id = null] = path.split('/').filter(Boolean);
  return { page, id: id ? decodeURIComponent(id) : null, query: new URLSearchParams(search) };
}

function show() {
  unmount();
  unmount = () => {};
  if (!context) return;
  const route = currentRoute();
  let page = PAGES[route.page] ? route.page : 'tasks';
  if (NEEDS_READ.has(page) && !context.access.read) page = 'tasks';
  let module = PAGES[page];
  if (page === 'tasks' && route.id) module = route.id !== 'new' ? task : context.access.changeTasks ? newTask : tasks;
  if (page === 'schedules' && route.id) module = scheduleForm;
  if (page === 'pipelines' && route.id) module = pipeline;
  for (const link of document.querySelectorAll('#nav a')) {
    link.classList.toggle('current', link.dataset.page === page);
  }
  main.replaceChildren();
  unmount = module.mount(main, context, route) || (() => {});
}

/// A message at the bottom of the window for a few seconds: what an action did.
function toast(message, kind = 'info') {
  const box = document.getElementById('toast');
  fill(box, message);
  box.dataset.kind = kind;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => {
    box.hidden = true;
  }, kind === 'error' ? 8000 : 4000);
}

async function loadConfig() {
  try {
    const response = await fetch('config.json', { cache: 'no-store' });
    return response.ok ? await response.json() : {};
  } catch {
    return {};
  }
}

function signedOut(message) {
  unmount();
  unmount = () => {};
  context = null;
  forget();
  document.getElementById('nav').hidden = true;
  document.getElementById('find-task').hidden = true;
  document.getElementById('sign-out').hidden = true;
  document.getElementById('live').hidden = true;
  fill(document.getElementById('scopes'));
  main.replaceChildren();
  signIn.mount(main, { message, onToken: signedIn });
}

/// Checks `bearer` and, if the API takes it, opens the console with it. Throws the
/// API's refusal for the sign-in form to show.
async function signedIn(bearer) {
  const [access, config] = await Promise.all([probe(bearer), loadConfig()]);
  remember(bearer);
  context = { access, config, toast };
  for (const link of document.querySelectorAll('#nav a')) {
    link.hidden = link.dataset.needs === 'read' && !access.read;
  }
  document.getElementById('nav').hidden = false;
  document.getElementById('find-task').hidden = false;
  document.getElementById('sign-out').hidden = false;
  document.getElementById('live').hidden = false;
  fill(document.getElementById('scopes'), h('span', { title: 'What this token may do' }, describe(access)));
  document.body.dataset.scopes = describe(access);
  show();
}

const LIVE_TEXT = {
  off: 'not live',
  connecting: 'connecting…',
  live: 'live',
  retrying: 'reconnecting…',
  absent: 'polling (no event stream on this node)',
};

function start() {
  whenRefused((message) => {
    // Several requests in flight may be refused at once: one sign-out is enough.
    if (context) signedOut(`Signed out: the server refused the token (${message}).`);
  });
  onStateChange((state) => {
    const live = document.getElementById('live');
    live.dataset.state = state;
    fill(live, LIVE_TEXT[state] || state);
  });
  document.getElementById('sign-out').addEventListener('click', () => signedOut(null));
  findTask(document.getElementById('find-task'));
  window.addEventListener('hashchange', show);
  const saved = token();
  if (saved) {
    signedIn(saved).catch((e) => signedOut(`Sign in again: ${e.message}`));
  } else {
    signedOut(null);
  }
}

start();
