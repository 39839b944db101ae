// What the signed-in token may do, so the pages show only the buttons that would work:
// the API tells a token its own scopes (`GET /v1/me`).
//   read        the cluster's state (runners, nodes, queues, every task): `read` or `admin`
//   changeTasks cancel and re-run tasks, steer schedules (a `submit` token: its own
//               ones only): `submit` or `admin`
//   admin       runners, queues, tokens
// A button may still be refused for one item (another's task, to a token with `submit`
// and `read`): the page then says the server's reason.

import { get } from './api.js';

/// Checks `bearer` (the token being signed in with) and finds what it may do; throws the
/// server's ApiError when the token is refused (401: unknown, revoked, expired; 403: a
/// runner's token).
export async function probe(bearer) {
  const me = await get('/v1/me', { bearer });
  return accessOf(me.scopes);
}

/// What a list of scopes allows.
export function accessOf(scopes) {
  const admin = scopes.includes('admin');
  return {
    admin,
    read: admin || scopes.includes('read'),
    changeTasks: admin || scopes.includes('submit'),
  };
}

/// The scopes as the header shows them.
export function describe(access) {
  if (access.admin) return 'admin';
  const scopes = [];
  if (access.changeTasks) scopes.push('submit');
  if (access.read) scopes.push('read');
  return scopes.join(' + ') || 'no scope';
}
