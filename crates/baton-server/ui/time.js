// Times as people read them: how long ago, how long it took, when exactly (local time).

/// `3s ago`, `5m ago`, `2h ago`, `4d ago`; `in 3s` for the future; '—' for none.
export function ago(iso, now = Date.now()) {
  if (!iso) return '—';
  const ms = now - Date.parse(iso);
  const text = span(Math.abs(ms));
  return ms >= 0 ? `${text} ago` : `in ${text}`;
}

/// A duration in ms as `850ms`, `12.3s`, `4m 05s`, `2h 03m`, `3d 4h`.
export function span(ms) {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const pad = (n) => String(Math.floor(n)).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/// The time between two instants, or '—' if one is missing.
export function between(fromIso, toIso) {
  if (!fromIso || !toIso) return '—';
  return span(Math.max(0, Date.parse(toIso) - Date.parse(fromIso)));
}

/// An instant in the browser's local time, to the second.
export function when(iso) {
  if (!iso) return '—';
  return new Date(iso).toLocaleString(undefined, { hour12: false });
}

/// The value of a `datetime-local` field for an instant: the browser's local time, to
/// the minute ('' for none).
export function localInputOf(iso) {
  if (!iso || Number.isNaN(Date.parse(iso))) return '';
  const at = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/// The instant a `datetime-local` field's value names, in RFC 3339 (UTC), or '' for an
/// empty or unreadable value.
export function instantOfLocalInput(value) {
  if (!value) return '';
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? '' : at.toISOString();
}
