// A queue's last hour as small inline SVG charts, drawn from `GET /v1/queues/trends`:
// tasks finished each minute (succeeded and failed stacked, submitted as a line over
// them) and how many waited. No library: rectangles and polylines, coloured by the style
// sheet (the page's CSP allows no inline style), each minute with its numbers in a
// tooltip.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 300;
const HEIGHT = 70;
/// Room at the top for the scale's label.
const TOP = 12;

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  for (const child of children) element.append(child);
  return element;
}

/// The top of a scale that holds `n`: 1, 2, 5, 10, 20, 50 … (at least 1).
export function niceMax(n) {
  if (!(n > 1)) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (n <= step * power) return step * power;
  return 10 * power;
}

/// What a queue's points add up to: `{ submitted, succeeded, failed, cancelled }`.
export function totals(points) {
  const sum = { submitted: 0, succeeded: 0, failed: 0, cancelled: 0 };
  for (const p of points) {
    sum.submitted += p.submitted || 0;
    sum.succeeded += p.succeeded || 0;
    sum.failed += p.failed || 0;
    sum.cancelled += p.cancelled || 0;
  }
  return sum;
}

/// The points of a polyline through `values` (null: a gap, which ends the line there),
/// scaled to `max` over the chart: a list of runs, each "x,y x,y …".
export function linePoints(values, max) {
  const runs = [];
  let run = [];
  const step = WIDTH / Math.max(values.length, 1);
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      if (run.length) runs.push(run.join(' '));
      run = [];
      return;
    }
    const x = (i + 0.5) * step;
    const y = HEIGHT - (v / max) * (HEIGHT - TOP);
    run.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  if (run.length) runs.push(run.join(' '));
  return runs;
}

/// A run of a line: a polyline, or a dot for a run of one point (a minute with gaps on
/// both sides, which a polyline would not show).
function line(run, cls) {
  if (run.includes(' ')) return svg('polyline', { points: run, class: cls });
  const [x, y] = run.split(',');
  return svg('circle', { cx: x, cy: y, r: 2, class: `${cls} dot` });
}

const hhmm = (iso) => new Date(iso).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', hour12: false });

function frame(label, scaleText) {
  return svg(
    'svg',
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'chart', role: 'img', 'aria-label': label },
    svg('line', { x1: 0, y1: HEIGHT - 0.5, x2: WIDTH, y2: HEIGHT - 0.5, class: 'axis' }),
    svg('line', { x1: 0, y1: TOP, x2: WIDTH, y2: TOP, class: 'grid' }),
    svg('text', { x: 2, y: TOP - 3, class: 'scale' }, scaleText),
  );
}

/// Tasks finished each minute, succeeded below failed below cancelled (or expired), and
/// those submitted as a line.
export function throughputChart(points) {
  const finished = (p) => (p.succeeded || 0) + (p.failed || 0) + (p.cancelled || 0);
  const max = niceMax(Math.max(0, ...points.map((p) => Math.max(finished(p), p.submitted || 0))));
  const chart = frame('Tasks finished and submitted each minute', `${max}/min`);
  const step = WIDTH / Math.max(points.length, 1);
  const scale = (n) => (n / max) * (HEIGHT - TOP);
  points.forEach((p, i) => {
    const ok = scale(p.succeeded || 0);
    const bad = scale(p.failed || 0);
    const stopped = scale(p.cancelled || 0);
    const x = i * step + step * 0.1;
    const width = step * 0.8;
    const minute = svg(
      'g',
      { class: 'minute' },
      svg('title', {}, `${hhmm(p.at)}: ${p.submitted || 0} submitted, ${p.succeeded || 0} succeeded, ${p.failed || 0} failed, ${p.cancelled || 0} cancelled`),
      // The whole minute's column, so its tooltip shows wherever the pointer is in it.
      svg('rect', { x: i * step, y: 0, width: step, height: HEIGHT, class: 'hover' }),
    );
    if (ok > 0) minute.append(svg('rect', { x, y: HEIGHT - ok, width, height: ok, class: 'succeeded' }));
    if (bad > 0) minute.append(svg('rect', { x, y: HEIGHT - ok - bad, width, height: bad, class: 'failed' }));
    if (stopped > 0) minute.append(svg('rect', { x, y: HEIGHT - ok - bad - stopped, width, height: stopped, class: 'cancelled' }));
    chart.append(minute);
  });
  for (const run of linePoints(points.map((p) => p.submitted || 0), max)) chart.append(line(run, 'submitted'));
  return chart;
}

/// How many tasks waited, minute by minute (a gap where a node did not say).
export function depthChart(points) {
  const max = niceMax(Math.max(0, ...points.map((p) => p.depth ?? 0)));
  const chart = frame('Tasks waiting, each minute', `${max} waiting`);
  const step = WIDTH / Math.max(points.length, 1);
  points.forEach((p, i) => {
    chart.append(svg('g', { class: 'minute' }, svg('title', {}, `${hhmm(p.at)}: ${p.depth ?? 'unknown'} waiting`), svg('rect', { x: i * step, y: 0, width: step, height: HEIGHT, class: 'hover' })));
  });
  for (const run of linePoints(points.map((p) => p.depth ?? null), max)) chart.append(line(run, 'depth'));
  return chart;
}
