// The fields of a task as the forms take them (text typed by a person) and the body
// `POST /v1/tasks` takes — for a new task, and for a schedule's template, whose other
// fields (payload, retry policy, webhook…) an edit keeps as they were. Checked here only
// as far as a person needs to be told at once; the server checks the rest and its
// answer is shown beside the form.

import { joinWords, splitWords } from './shell_words.js';

/// The fields the forms edit; a template's others are kept.
const EDITED = ['queue', 'labels', 'command', 'script', 'env', 'priority', 'timeout_s', 'max_attempts'];

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/// `{ body, errors }` from the form's values: `errors` maps a field to what is wrong
/// with it (empty when none). `base`: the template being edited.
export function taskBody(values, base = {}) {
  const errors = {};
  const body = Object.fromEntries(Object.entries(base).filter(([name]) => !EDITED.includes(name)));

  const queue = (values.queue || '').trim();
  if (queue) body.queue = queue;

  const labels = (values.labels || '').split(/[\s,]+/).filter(Boolean);
  if (labels.length) body.labels = labels;

  if (values.mode === 'script') {
    if (!(values.script || '').trim()) errors.script = 'Write the script to run.';
    else body.script = values.script;
  } else {
    try {
      const words = splitWords(values.command);
      if (!words.length) errors.command = 'Give the program to run and its arguments.';
      else body.command = words;
    } catch (e) {
      errors.command = `The command cannot be split into words: ${e.message}.`;
    }
  }

  const env = {};
  (values.env || '').split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    const eq = line.indexOf('=');
    const name = eq === -1 ? line.trim() : line.slice(0, eq).trim();
    if (eq === -1 || !ENV_NAME.test(name)) {
      errors.env ??= `Line ${i + 1}: write NAME=value, the name of letters, digits and _.`;
    } else if (name in env) {
      errors.env ??= `Line ${i + 1}: ${name} is given twice.`;
    } else {
      env[name] = line.slice(eq + 1);
    }
  });
  if (Object.keys(env).length) body.env = env;

  for (const [name, field] of [['priority', 'priority'], ['timeout_s', 'timeout'], ['max_attempts', 'maxAttempts']]) {
    const text = String(values[field] ?? '').trim();
    if (!text) continue;
    if (!/^-?\d+$/.test(text)) errors[name] = 'A whole number.';
    else body[name] = Number(text);
  }
  return { body, errors };
}

/// The form's values for a task or template: what `taskBody` turns back into it.
export function formValues(task = {}) {
  return {
    queue: task.queue || '',
    labels: (task.labels || []).join(', '),
    mode: task.script ? 'script' : 'command',
    command: task.command ? joinWords(task.command) : '',
    script: task.script || '',
    env: Object.entries(task.env || {}).map(([k, v]) => `${k}=${v}`).join('\n'),
    priority: task.priority ? String(task.priority) : '',
    timeout: task.timeout_s ? String(task.timeout_s) : '',
    maxAttempts: task.max_attempts ? String(task.max_attempts) : '',
  };
}
