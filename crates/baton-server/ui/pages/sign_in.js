// The sign-in form: an API token (`bat_...`, or the node's bootstrap token), checked
// against the API before the console opens, with the server's reason when refused.

import { ApiError } from '../api.js';
import { h } from '../dom.js';

/// Why a token was refused, in words a person can act on.
export function refusal(error) {
  if (!(error instanceof ApiError)) {
    return `The node could not be reached (${error.message}). Check the address and try again.`;
  }
  if (error.status === 401) {
    return `This token was refused: the server does not know it, or it was revoked or has expired. (${error.message})`;
  }
  if (error.status === 403) {
    return `This token may not use the console: ${error.message}. Use an API token with the read, submit or admin scope.`;
  }
  return `Signing in failed: ${error.message}`;
}

export function mount(main, { message, onToken }) {
  const input = h('input', {
    id: 'token',
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    placeholder: 'bat_…',
  });
  const error = h('p', { id: 'sign-in-error', class: 'error', role: 'alert', hidden: !message }, message || '');
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { id: 'sign-in', class: 'sign-in' },
    h('h1', {}, 'Sign in to Baton'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h(
      'p',
      { class: 'hint' },
      'Kept in this tab only, until it closes, and sent to this node in an Authorization header.',
    ),
    button,
    error,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    button.disabled = true;
    error.hidden = true;
    try {
      await onToken(value);
    } catch (e) {
      error.textContent = refusal(e);
      error.hidden = false;
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  main.appendChild(form);
  input.focus();
  return () => {};
}
