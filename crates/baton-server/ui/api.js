// Requests to the node's /v1 API with the signed-in token: the same API, and the same
// answers, as any other client has.

import { token } from './session.js';

/// An answer that was not 2xx, with the server's `{"error": {"code", "message"}}`.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/// Called when the server refuses the token (401) after sign-in: revoked, expired.
let onRefused = () => {};
export function whenRefused(handler) {
  onRefused = handler;
}

/// The fetch options for a call with `bearer` (the signed-in token unless given).
export function authorized(init = {}, bearer = token()) {
  const headers = new Headers(init.headers || {});
  if (bearer) headers.set('Authorization', `Bearer ${bearer}`);
  return { ...init, headers };
}

/// `path` with its query: the parameters that are set (not null, undefined or '').
export function withQuery(path, query = {}) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/// Calls the API and gives the JSON answer (null for 204); throws ApiError otherwise.
/// `bearer`: a token to try instead of the signed-in one (the sign-in form's).
export async function call(method, path, { body, query, signal, bearer } = {}) {
  const init = { method, signal };
  if (body !== undefined) {
    init.headers = { 'Content-Type': 'application/json' };
    init.body = JSON.stringify(body);
  }
  const response = await fetch(withQuery(path, query), authorized(init, bearer ?? token()));
  if (!response.ok) throw await errorOf(response, bearer === undefined);
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, options) => call('GET', path, options);
export const post = (path, body, options = {}) => call('POST', path, { ...options, body });
export const patch = (path, body, options = {}) => call('PATCH', path, { ...options, body });
export const del = (path, options) => call('DELETE', path, options);

/// The ApiError of a failed answer. `signedIn`: a 401 means the session's token stopped
/// working, and the user is sent back to sign in.
export async function errorOf(response, signedIn = true) {
  let code = `http_${response.status}`;
  let message = response.statusText || `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // Not JSON (a proxy's page): the status says enough.
  }
  if (response.status === 401 && signedIn) onRefused(message);
  return new ApiError(response.status, code, message);
}
