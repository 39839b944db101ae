// One BullMQ worker process of the baseline, forked by baseline.mjs: a Worker with a
// no-op processor and BullMQ's default options but `autorun: false`, so that it connects
// (and pays for loading Node and BullMQ) before the parent starts the clock, and starts
// taking jobs only when told to.
//
// It talks to the parent over the IPC channel only, never through Redis, so that the
// parent's bookkeeping adds nothing to the Redis commands it counts:
//
//   parent -> worker   {cmd: "run"}    start taking jobs (and the CPU clock)
//                      {cmd: "cpu"}    report the CPU used since "run"
//                      {cmd: "close"}  close the Worker and exit
//   worker -> parent   {ready: true}
//                      {completed, failed}  running totals, at most every 20 ms
//                      {pickup: {id, latencyMs}}  a pickup job completed
//                      {failedJob: {id, reason}}  a job failed (the run is void)
//                      {cpu: {user, system}}  microseconds, process.cpuUsage()
//
// Usage (by baseline.mjs): node worker.mjs '<json: {queue, connection, concurrency}>'

import { Worker } from 'bullmq';
import { once } from 'node:events';
import { now } from './clock.mjs';

const { queue, connection, concurrency } = JSON.parse(process.argv[2]);

const send = message => {
  if (process.connected) process.send(message);
};

// Pickup latency is taken at the processor's entry, against the timestamp the producer
// put in the job just before `queue.add` (same machine, same wall clock: see clock.mjs).
const pickupLatency = new Map();

const worker = new Worker(
  queue,
  async job => {
    if (job.name === 'pickup') {
      pickupLatency.set(job.id, now() - job.data.sentAt);
    }
  },
  { connection, concurrency, autorun: false },
);

let completed = 0;
let failed = 0;
worker.on('completed', job => {
  completed++;
  if (job.name === 'pickup') {
    const latencyMs = pickupLatency.get(job.id);
    pickupLatency.delete(job.id);
    send({ pickup: { id: job.id, latencyMs } });
  }
});
worker.on('failed', (job, err) => {
  failed++;
  send({ failedJob: { id: job?.id, reason: String(err?.message ?? err) } });
});
worker.on('error', err => console.error(`bullmq worker ${process.pid}: ${err?.message ?? err}`));

// Totals on a timer rather than a message per job: 20,000 messages would cost the
// worker (and the parent) more than the no-op jobs they report.
let reported = -1;
setInterval(() => {
  if (completed + failed !== reported) {
    reported = completed + failed;
    send({ completed, failed });
  }
}, 20).unref();

let cpuBase;
process.on('message', async message => {
  switch (message.cmd) {
    case 'run':
      cpuBase = process.cpuUsage();
      worker.run().catch(err => {
        console.error(`bullmq worker ${process.pid}: run failed: ${err?.message ?? err}`);
        process.exit(1);
      });
      break;
    case 'cpu':
      send({ cpu: process.cpuUsage(cpuBase) });
      break;
    case 'close':
      await worker.close();
      process.exit(0);
  }
});
// The parent gone (crashed or killed): nobody will close this worker, so exit.
process.on('disconnect', () => process.exit(0));

// Ready once both connections are: the one for commands and the blocking one the Worker
// waits for jobs on ('ready' is emitted when the blocking one is up).
await Promise.all([worker.waitUntilReady(), once(worker, 'ready')]);
send({ ready: true });
