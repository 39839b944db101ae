// A task's trace: its id, from the W3C `traceparent` the task keeps, and the link to it
// the operator configured (`baton serve --ui-trace-url`, e.g. a Jaeger UI's
// `https://jaeger.example.com/trace/{trace_id}`).

/// The trace id of a `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<flags>`), or
/// null.
export function traceIdOf(traceparent) {
  const parts = (traceparent || '').split('-');
  return parts.length === 4 && /^[0-9a-f]{32}$/.test(parts[1]) ? parts[1] : null;
}

/// The link to the trace, or null without a template or a trace. Only http(s): the
/// node checks the template at its start, and the page does not take that on trust.
export function traceLink(template, traceparent) {
  const traceId = traceIdOf(traceparent);
  if (!template || !traceId) return null;
  const url = template.split('{trace_id}').join(traceId);
  return /^https?:\/\//i.test(url) ? url : null;
}
