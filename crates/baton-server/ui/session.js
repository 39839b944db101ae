// The API token the user signed in with, for this tab only.
//
// sessionStorage: it survives a reload of the tab but not its closing, and no other tab
// or site sees it. It leaves the page only in the `Authorization` header of requests to
// this node's /v1 API — never in a URL (addresses end up in logs and histories) and
// never in a cookie. Since the browser attaches nothing by itself, another site cannot
// make it send an authenticated request: the console is safe from cross-site request
// forgery by construction, with no CSRF token to manage.

const KEY = 'baton.token';

export function token() {
  return sessionStorage.getItem(KEY);
}

export function remember(value) {
  sessionStorage.setItem(KEY, value);
}

export function forget() {
  sessionStorage.removeItem(KEY);
}
