// A task as a person names it: its whole id (a UUID) or its short id, the last 12 hex
// digits the tables show (the random end of a UUIDv7), as git takes a commit's short
// hash. The API takes either in every task path and answers 409 when a short id names
// several tasks. No imports, so the unit tests load it as it is.

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/;
const SHORT = /^[0-9a-f]{12}$/;

/// How many hex digits a short id has.
export const SHORT_ID_LENGTH = 12;

/// `{ id }` for a whole id (hyphenated, lower case), `{ short }` for a short id, or
/// null for anything else: the text as pasted, surrounding spaces and case aside.
export function taskRef(text) {
  const value = String(text ?? '').trim().toLowerCase();
  if (UUID.test(value)) {
    const hex = value.replaceAll('-', '');
    return { id: `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}` };
  }
  if (SHORT.test(value)) return { short: value };
  return null;
}

/// The short form of a whole id, as the tables show it.
export function shortOf(id) {
  return id ? id.slice(-SHORT_ID_LENGTH) : '';
}
