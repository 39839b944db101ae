// A pipeline's jobs drawn as a graph (`GET /v1/pipelines/{id}`): a column per layer
// (the API's `layer`: 0 for a job that needs nothing, else one past its deepest need),
// a box per job coloured by its status, and an edge from each need to the job that
// needs it, drawn as its dependent's rule (`when`) says. Inline SVG, no library; the
// style sheet colours it (the page's CSP allows no inline style). Each box is a link to
// its task's page, with the job's error in its tooltip.

import { span } from './time.js';

const SVG = 'http://www.w3.org/2000/svg';
/// A job's box, and the room between boxes and around them, in the SVG's own units
/// (drawn one to one with CSS pixels: a wide graph scrolls in its box, never shrinks
/// below reading size).
export const BOX = { width: 176, height: 46 };
const COLUMN_GAP = 56;
const ROW_GAP = 14;
const MARGIN = 8;
/// How many characters of a job's name fit its box; the whole name is in its tooltip.
const NAME_FITS = 22;

/// How each rule releases a job, in words: the edges' legend and the task page's.
export const RELEASE_WORDS = {
  on_success: 'when every job it needs succeeded',
  on_failure: 'when what it needs has ended and a job of it did not succeed',
  always: 'when every job it needs has ended, however',
};

/// `text` cut to `max` characters, its end marked with an ellipsis when cut.
export function fit(text, max = NAME_FITS) {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/// Where each job's box goes: `{ width, height, boxes: [{ job, x, y }], edges: [{ from,
/// to, when, path }] }`. Within a column, jobs sit in the order of the mean height of
/// what they need (ties by name), which keeps most edges from crossing; each column is
/// centred on the tallest.
export function layout(jobs) {
  const columns = [];
  for (const job of jobs) (columns[job.layer] ||= []).push(job);
  const filled = columns.filter(Boolean);
  const tallest = Math.max(1, ...filled.map((c) => c.length));
  const pitch = BOX.height + ROW_GAP;
  const centreOf = new Map();
  const boxes = [];
  filled.forEach((column, index) => {
    const keyed = column.map((job) => {
      const above = (job.needs || []).map((n) => centreOf.get(n)).filter((y) => y !== undefined);
      return { job, key: above.length ? above.reduce((a, b) => a + b, 0) / above.length : 0 };
    });
    keyed.sort((a, b) => a.key - b.key || a.job.name.localeCompare(b.job.name));
    const top = MARGIN + ((tallest - column.length) * pitch) / 2;
    keyed.forEach(({ job }, row) => {
      const box = { job, x: MARGIN + index * (BOX.width + COLUMN_GAP), y: top + row * pitch };
      centreOf.set(job.name, box.y + BOX.height / 2);
      boxes.push(box);
    });
  });
  const byName = new Map(boxes.map((b) => [b.job.name, b]));
  const edges = [];
  for (const box of boxes) {
    for (const need of box.job.needs || []) {
      const from = byName.get(need);
      if (!from) continue;
      const [x1, y1] = [from.x + BOX.width, from.y + BOX.height / 2];
      const [x2, y2] = [box.x, box.y + BOX.height / 2];
      // A curve leaving and entering level: an edge across several columns stays clear
      // of the boxes' sides.
      const bend = Math.max(COLUMN_GAP / 2, (x2 - x1) / 3);
      const path = `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}`;
      edges.push({ from: need, to: box.job.name, when: box.job.when || 'on_success', path });
    }
  }
  return {
    width: MARGIN * 2 + filled.length * BOX.width + Math.max(0, filled.length - 1) * COLUMN_GAP,
    height: MARGIN * 2 + tallest * BOX.height + (tallest - 1) * ROW_GAP,
    boxes,
    edges,
  };
}

/// How long a job ran ('' before it started); while it runs, since when (the page's
/// ticker counts it on).
export function jobTime(job, now = Date.now()) {
  if (!job.started_at) return { text: '' };
  if (job.finished_at) return { text: span(Math.max(0, Date.parse(job.finished_at) - Date.parse(job.started_at))) };
  return { text: span(Math.max(0, now - Date.parse(job.started_at))), since: job.started_at };
}

/// A job's tooltip: its name, status, runs, rule and error.
export function jobTitle(job) {
  const lines = [`${job.name}: ${job.status}`];
  if (job.runs > 1) lines.push(`run ${job.runs} (re-run ${job.runs - 1}×)`);
  if (job.needs?.length) lines.push(`needs ${job.needs.join(', ')}; runs ${RELEASE_WORDS[job.when] || job.when}`);
  if (job.exit_code !== undefined && job.exit_code !== null) lines.push(`exit code ${job.exit_code}`);
  if (job.error) lines.push(job.error);
  return lines.join('\n');
}

function svg(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) element.setAttribute(name, String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) element.append(child);
  return element;
}

/// The graph of `jobs` as an SVG element.
export function drawGraph(jobs) {
  const { width, height, boxes, edges } = layout(jobs);
  const picture = svg(
    'svg',
    { class: 'graph', id: 'pipeline-graph', width, height, viewBox: `0 0 ${width} ${height}`, role: 'group', 'aria-label': 'The pipeline’s jobs and what each needs' },
    svg('defs', {}, svg('marker', { id: 'pipeline-arrow', viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 8, markerHeight: 8, orient: 'auto' }, svg('path', { d: 'M 0 0 L 8 4 L 0 8 z', class: 'arrow' }))),
  );
  const lines = svg('g', { class: 'edges' });
  for (const edge of edges) {
    lines.append(svg('path', { d: edge.path, class: `edge edge-${edge.when}`, 'data-from': edge.from, 'data-to': edge.to, 'marker-end': 'url(#pipeline-arrow)' }));
  }
  const boxesGroup = svg('g', { class: 'jobs' });
  for (const { job, x, y } of boxes) {
    const time = jobTime(job);
    boxesGroup.append(
      svg(
        'a',
        { href: `#/tasks/${job.task_id}`, class: `job job-${job.status}`, 'data-job': job.name, 'data-status': job.status, 'data-layer': job.layer, 'data-task-id': job.task_id },
        svg('title', {}, jobTitle(job)),
        svg('rect', { x, y, width: BOX.width, height: BOX.height, rx: 6 }),
        svg('text', { x: x + 10, y: y + 19, class: 'job-name' }, fit(job.name)),
        svg(
          'text',
          { x: x + 10, y: y + 36, class: 'job-state' },
          job.status,
          job.runs > 1 ? ` · run ${job.runs}` : null,
          time.text ? ' · ' : null,
          time.text ? svg('tspan', { 'data-running-since': time.since }, time.text) : null,
        ),
      ),
    );
  }
  picture.append(lines, boxesGroup);
  return picture;
}
