// The console's pure parts, in Node: the ANSI renderer, the SSE parser and the trace
// link. Run by tests/ui.rs (`node --test`); each module is loaded from its source as the
// browser gets it, without a build step in between.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

/// A console module with no imports of its own, loaded from crates/baton-server/ui.
async function consoleModule(name) {
  const source = await readFile(new URL(`../../crates/baton-server/ui/${name}`, import.meta.url), 'utf8');
  return import(`data:text/javascript;base64,${Buffer.from(source).toString('base64')}`);
}

const { AnsiRenderer, ansiToHtml } = await consoleModule('ansi.js');
const { SseParser } = await consoleModule('sse.js');
const { traceLink } = await consoleModule('trace.js');

// The attack from the security review: `printf '\033]%.0s' $(seq 300000)` in a log froze
// every viewer's tab (64 KiB took 7.5 s): each unterminated opening was scanned to the
// end. A MiB of each kind of opening renders at once now.
test('a MiB of unterminated sequences renders in linear time', () => {
  for (const opening of ['\x1b]', '\x1b[1;', '\x1b]8;;\x1b[']) {
    const text = opening.repeat(Math.ceil((1 << 20) / opening.length));
    const started = performance.now();
    const html = new AnsiRenderer().push(text);
    const took = performance.now() - started;
    assert.ok(took < 2000, `${JSON.stringify(opening)}: ${took.toFixed(0)} ms`);
    assert.ok(!html.includes('\x1b'), 'no escape reaches the page');
  }
});

test('text is escaped, whatever the colours', () => {
  assert.equal(ansiToHtml('<script>alert("x")</script> & \'q\''), '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;');
  assert.equal(ansiToHtml('\x1b[31m<b>\x1b[0m'), '<span class="fg-1">&lt;b&gt;</span>');
});

test('SGR codes become classes, and a reset ends them', () => {
  assert.equal(ansiToHtml('\x1b[1;32mok\x1b[0m done'), '<span class="bold fg-2">ok</span> done');
  assert.equal(ansiToHtml('\x1b[93;44mx\x1b[39my\x1b[m'), '<span class="fg-11 bg-4">x</span><span class="bg-4">y</span>');
  assert.equal(ansiToHtml('\x1b[4mu\x1b[24mv'), '<span class="underline">u</span>v');
});

test('256-colour and true-colour codes take the nearest of the 16', () => {
  assert.equal(ansiToHtml('\x1b[38;5;196mr'), '<span class="fg-9">r</span>');
  assert.equal(ansiToHtml('\x1b[48;2;0;0;0mk'), '<span class="bg-0">k</span>');
});

test('other control sequences and characters are dropped', () => {
  assert.equal(ansiToHtml('a\x1b[2Kb\x1b[1Gc\r\n'), 'abc\n');
  assert.equal(ansiToHtml('\x1b]8;;http://x\x07link\x1b]8;;\x07'), 'link');
  assert.equal(ansiToHtml('bell\x07\tend'), 'bell\tend');
});

test('a sequence cut between two pieces of the stream is joined', () => {
  const renderer = new AnsiRenderer();
  assert.equal(renderer.push('plain \x1b[3'), 'plain ');
  assert.equal(renderer.push('1mred'), '<span class="fg-1">red</span>');
  assert.equal(renderer.push(' still'), '<span class="fg-1"> still</span>');
});

test('SSE frames are parsed across pieces, comments skipped, ids kept', () => {
  const frames = [];
  const parser = new SseParser((frame) => frames.push(frame));
  parser.push(': keep-alive\n\nid: 1-0:3\nevent: task\nda');
  parser.push('ta: {"kind":"task"}\r\n\r');
  parser.push('\nevent: resync\ndata: {"kind":"resync"}\n');
  parser.push('data: second line\n\n');
  assert.deepEqual(frames, [
    { id: '1-0:3', event: 'task', data: '{"kind":"task"}' },
    { id: '1-0:3', event: 'resync', data: '{"kind":"resync"}\nsecond line' },
  ]);
  assert.equal(parser.lastEventId, '1-0:3');
});

test('a trace link needs a template and a well-formed traceparent', () => {
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  assert.equal(traceLink('https://jaeger.example/trace/{trace_id}', traceparent), 'https://jaeger.example/trace/0af7651916cd43dd8448eb211c80319c');
  assert.equal(traceLink(null, traceparent), null);
  assert.equal(traceLink('https://jaeger.example/trace/{trace_id}', 'garbage'), null);
  assert.equal(traceLink('javascript:alert(1)//{trace_id}', traceparent), null);
});
