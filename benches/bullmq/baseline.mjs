// BullMQ as a baseline for Baton's throughput bench (issue 28): the same drain and pickup
// that benches/throughput measures for Baton, run by BullMQ on the same machine against
// the Redis it is given, on a fresh queue that is obliterated at the end.
//
//   node baseline.mjs --redis redis://127.0.0.1:6379 --drain 20000 --workers 2 \
//        --concurrency 16 --pickups 200          (--quick: 5,000 jobs and 50 pickups)
//
// - drain: N jobs bulk-added (Queue.addBulk, in batches of 1,000, one after another
//   from one client, as Baton's bulk submit does), then drained by `--workers` forked processes (worker.mjs)
//   × `--concurrency`, with a no-op processor. The rate is Baton's definition
//   (benches/throughput/drains.rs, `drained`): N over first lease to last finish, read
//   from the queue's own timestamps (the jobs' processedOn and finishedOn). Beside it,
//   per job: the workers' CPU (from their `run` to the last completion), redis-server's
//   CPU (INFO cpu) and the Redis commands (INFO commandstats, the sum of calls without
//   INFO's own, as benches/throughput/counters.rs counts them; commands a script runs
//   count too, as they do for Baton).
// - pickup: `--pickups` jobs added one at a time, 20 ms after the previous one completed,
//   to idle workers; latency = just before `queue.add` to the processor's entry, both
//   stamped with clock.mjs's clock. Twice: to one Worker in this (the producer's)
//   process, as Baton's bench has its submitter and parked runner in one process (the
//   figure reported as pickup_p50_ms and pickup_p99_ms); and to the drain's worker
//   processes, idle (pickup_forked_*: one more process to wake, which costs most on a
//   busy machine).
//
// Progress goes to stderr; stdout gets one JSON line at the end (benches/throughput/
// bullmq.rs parses it). On failure: a message on stderr, the queue obliterated if it can
// be, exit status 1.

import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { now } from './clock.mjs';

const BULK_BATCH = 1000;
const BULK_IN_FLIGHT = 1;
const PICKUP_GAP_MS = 20;
const DRAIN_DEADLINE_MS = 600_000;
const PICKUP_DEADLINE_MS = 10_000;
const READY_DEADLINE_MS = 30_000;

const log = message => console.error(`bullmq baseline: ${message}`);

function options() {
  const { values } = parseArgs({
    options: {
      redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
      drain: { type: 'string' },
      workers: { type: 'string', default: '2' },
      concurrency: { type: 'string', default: '16' },
      pickups: { type: 'string' },
      quick: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.error(
      'usage: node baseline.mjs [--redis URL] [--drain N] [--workers N] [--concurrency N] ' +
        '[--pickups N] [--quick]\n' +
        'defaults: redis://127.0.0.1:6379, 20000 jobs (5000 with --quick), 2 workers x 16, ' +
        '200 pickups (50 with --quick); 0 skips a phase',
    );
    process.exit(0);
  }
  const count = (name, fallback) => {
    const raw = values[name] ?? String(fallback);
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} wants a whole number, not ${raw}`);
    return n;
  };
  const opts = {
    redis: values.redis,
    drain: count('drain', values.quick ? 5_000 : 20_000),
    workers: count('workers', 2),
    concurrency: count('concurrency', 16),
    pickups: count('pickups', values.quick ? 50 : 200),
  };
  if (opts.workers < 1 || opts.concurrency < 1) throw new Error('--workers and --concurrency must be at least 1');
  return opts;
}

// BullMQ wants connection options rather than an ioredis instance it did not make: given
// options, it sets `maxRetriesPerRequest: null` on the workers' blocking connections
// itself; given an instance made with ioredis's default (20), a Worker throws.
function connectionOptions(url) {
  const u = new URL(url);
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') throw new Error(`not a redis:// URL: ${url}`);
  return {
    host: u.hostname || '127.0.0.1',
    port: Number(u.port || 6379),
    ...(u.username && { username: decodeURIComponent(u.username) }),
    ...(u.password && { password: decodeURIComponent(u.password) }),
    ...(u.pathname.length > 1 && { db: Number(u.pathname.slice(1)) }),
    ...(u.protocol === 'rediss:' && { tls: {} }),
  };
}

// What the counters read: calls by command (INFO commandstats, INFO's own left out) and
// redis-server's CPU seconds (INFO cpu: user + system, all its threads).
async function redisCounters(redis) {
  const [stats, cpu] = await Promise.all([redis.info('commandstats'), redis.info('cpu')]);
  const calls = {};
  for (const line of stats.split('\r\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m && m[1] !== 'info') calls[m[1]] = Number(m[2]);
  }
  const field = name => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(cpu)?.[1] ?? NaN);
  return { calls, cpuSeconds: field('used_cpu_user') + field('used_cpu_sys') };
}

function commandsBetween(before, after) {
  const by = {};
  let total = 0;
  for (const [name, n] of Object.entries(after.calls)) {
    const d = n - (before.calls[name] ?? 0);
    if (d > 0) {
      by[name] = d;
      total += d;
    }
  }
  return { total, by };
}

// A forked worker.mjs, with promises for its messages.
class WorkerProcess {
  constructor(config) {
    this.child = fork(new URL('./worker.mjs', import.meta.url), [JSON.stringify(config)], {
      // Its stdout to our stderr: our stdout carries only the JSON line.
      stdio: ['ignore', 2, 2, 'ipc'],
    });
    this.completed = 0;
    this.failed = [];
    this.waiters = new Map();
    this.exited = new Promise(resolve => this.child.once('exit', (code, signal) => resolve({ code, signal })));
    this.child.on('message', message => {
      if ('completed' in message) {
        this.completed = message.completed;
        this.onProgress?.();
      }
      if (message.failedJob) this.failed.push(message.failedJob);
      for (const key of ['ready', 'cpu', 'pickup']) {
        if (key in message) {
          const waiter = this.waiters.get(key);
          this.waiters.delete(key);
          waiter?.resolve(message[key]);
        }
      }
    });
    this.child.once('exit', (code, signal) => {
      for (const waiter of this.waiters.values()) {
        waiter.reject(new Error(`worker process ${this.child.pid} exited (code ${code}, signal ${signal})`));
      }
      this.waiters.clear();
    });
  }

  // The next message carrying `key`, or an error after `ms`.
  next(key, ms, what) {
    return new Promise((resolve, reject) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        reject(new Error(`worker process ${this.child.pid} has exited`));
        return;
      }
      const timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
      this.waiters.set(key, {
        resolve: v => (clearTimeout(timer), resolve(v)),
        reject: e => (clearTimeout(timer), reject(e)),
        cancel: () => clearTimeout(timer),
      });
    });
  }

  // Stops waiting for `key` (its promise stays pending and is dropped).
  cancel(key) {
    this.waiters.get(key)?.cancel();
    this.waiters.delete(key);
  }

  send(cmd) {
    this.child.send({ cmd });
  }

  async close() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.send('close');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(timer);
  }

  kill() {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

function percentile(sorted, p) {
  // As benches/throughput/main.rs's `percentile`.
  return sorted[Math.round((sorted.length - 1) * p)];
}

async function bulkAdd(queue, n) {
  const batches = [];
  for (let i = 0; i < n; i += BULK_BATCH) {
    batches.push(Array.from({ length: Math.min(BULK_BATCH, n - i) }, () => ({ name: 'noop', data: {} })));
  }
  const lanes = Array.from({ length: BULK_IN_FLIGHT }, async () => {
    for (let batch; (batch = batches.pop()); ) await queue.addBulk(batch);
  });
  await Promise.all(lanes);
}

// Resolves when the workers' completions reach `n`; fails on a failed job, a worker's
// exit or the deadline.
function allCompleted(workers, n) {
  return new Promise((resolve, reject) => {
    const deadline = setTimeout(
      () => reject(new Error(`the drain did not finish within ${DRAIN_DEADLINE_MS / 1000} s`)),
      DRAIN_DEADLINE_MS,
    );
    const check = () => {
      const failed = workers.flatMap(w => w.failed);
      if (failed.length) {
        clearTimeout(deadline);
        reject(new Error(`${failed.length} job(s) failed, the first: ${JSON.stringify(failed[0])}`));
      } else if (workers.reduce((sum, w) => sum + w.completed, 0) >= n) {
        clearTimeout(deadline);
        resolve();
      }
    };
    for (const w of workers) {
      w.onProgress = check;
      w.exited.then(({ code, signal }) => {
        clearTimeout(deadline);
        reject(new Error(`worker process ${w.child.pid} exited during the drain (code ${code}, signal ${signal})`));
      });
    }
    check();
  });
}

// First lease to last finish, in seconds, from the jobs' own timestamps (milliseconds,
// stamped by the workers: processedOn when moved to active, finishedOn when completed).
async function leaseToFinishSeconds(queue, redis, n) {
  const ids = await redis.zrange(queue.keys.completed, 0, -1);
  if (ids.length !== n) throw new Error(`${ids.length} of the ${n} jobs are in the completed set`);
  let first = Infinity;
  let last = -Infinity;
  for (let i = 0; i < ids.length; i += 1000) {
    const pipeline = redis.pipeline();
    for (const id of ids.slice(i, i + 1000)) pipeline.hmget(queue.toKey(id), 'processedOn', 'finishedOn');
    for (const [err, [processedOn, finishedOn]] of await pipeline.exec()) {
      if (err) throw err;
      first = Math.min(first, Number(processedOn));
      last = Math.max(last, Number(finishedOn));
    }
  }
  if (!Number.isFinite(first) || !Number.isFinite(last) || last <= first) {
    throw new Error(`unreadable job timestamps (first lease ${first}, last finish ${last})`);
  }
  return (last - first) / 1000;
}

async function drain(opts, queue, redis, workers) {
  log(`drain: adding ${opts.drain} jobs (addBulk, batches of ${BULK_BATCH}, ${BULK_IN_FLIGHT} at once)`);
  const beforeAdd = await redisCounters(redis);
  const addStarted = now();
  await bulkAdd(queue, opts.drain);
  const addMs = now() - addStarted;
  const waiting = await queue.getWaitingCount();
  if (waiting !== opts.drain) throw new Error(`${waiting} of the ${opts.drain} added jobs are waiting`);
  const beforeDrain = await redisCounters(redis);

  log(`drain: ${opts.workers} workers x ${opts.concurrency} draining`);
  const done = allCompleted(workers, opts.drain);
  for (const w of workers) w.send('run');
  await done;
  const cpu = await Promise.all(workers.map(w => (w.send('cpu'), w.next('cpu', 10_000, 'a worker CPU figure'))));
  const afterDrain = await redisCounters(redis);

  const seconds = await leaseToFinishSeconds(queue, redis, opts.drain);
  const workerCpuMs = cpu.reduce((sum, c) => sum + (c.user + c.system) / 1000, 0);
  const commands = commandsBetween(beforeDrain, afterDrain);
  const addCommands = commandsBetween(beforeAdd, beforeDrain);
  const perJob = x => x / opts.drain;
  const scripts = ['evalsha', 'eval', 'fcall'].reduce((sum, c) => sum + (commands.by[c] ?? 0), 0);
  const figures = {
    drain_jobs: opts.drain,
    drain_per_s: opts.drain / seconds,
    drain_cpu_ms_per_job: perJob(workerCpuMs),
    redis_cpu_ms_per_job: perJob((afterDrain.cpuSeconds - beforeDrain.cpuSeconds) * 1000),
    redis_cmds_per_job: perJob(commands.total),
    redis_scripts_per_job: perJob(scripts),
    bulk_add_per_s: opts.drain / (addMs / 1000),
    bulk_add_redis_cmds_per_job: perJob(addCommands.total),
  };
  const top = Object.entries(commands.by)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 8)
    .map(([name, n]) => `${name} ${perJob(n).toFixed(2)}`)
    .join(', ');
  log(
    `drain: ${figures.drain_per_s.toFixed(0)} jobs/s; per job: workers' CPU ${figures.drain_cpu_ms_per_job.toFixed(3)} ms, ` +
      `redis-server CPU ${figures.redis_cpu_ms_per_job.toFixed(3)} ms, ${figures.redis_cmds_per_job.toFixed(2)} Redis commands (${top})`,
  );
  log(`bulk add: ${figures.bulk_add_per_s.toFixed(0)} jobs/s, ${figures.bulk_add_redis_cmds_per_job.toFixed(2)} Redis commands per job`);
  return figures;
}

// Pickup latency: `opts.pickups` jobs added one at a time, each 20 ms after the previous
// one completed, to workers left idle; `taker` says who took each job and when its
// processor was entered ({expect(what) -> Promise<{id, latencyMs}>, cancel()}).
async function pickup(opts, queue, label, taker) {
  log(`pickup (${label}): ${opts.pickups} jobs, one at a time, ${PICKUP_GAP_MS} ms after the previous one completed`);
  const latencies = [];
  const addAnswered = [];
  for (let i = 0; i < opts.pickups; i++) {
    await sleep(PICKUP_GAP_MS);
    const reported = taker.expect(`pickup job ${i} to complete`);
    reported.catch(() => {}); // awaited below; this only keeps a failed add from leaving it unhandled
    const sentAt = now();
    const job = await queue.add('pickup', { sentAt });
    addAnswered.push(now() - sentAt);
    let got;
    try {
      got = await reported;
    } catch (err) {
      throw new Error(`pickup job ${job.id} (${label}): ${err.message}`);
    }
    taker.cancel();
    if (got.id !== job.id) throw new Error(`pickup job ${job.id} was added, job ${got.id} reported`);
    latencies.push(got.latencyMs);
  }
  latencies.sort((a, b) => a - b);
  addAnswered.sort((a, b) => a - b);
  const figures = {
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    max: latencies.at(-1),
    addP50: percentile(addAnswered, 0.5),
  };
  log(
    `pickup (${label}): p50 ${figures.p50.toFixed(2)} ms, p99 ${figures.p99.toFixed(2)} ms, ` +
      `max ${figures.max.toFixed(2)} ms (n=${latencies.length}); queue.add alone answered at p50 ` +
      `${figures.addP50.toFixed(2)} ms`,
  );
  return figures;
}

// The forked workers as pickup takers: whichever takes the job reports it.
function forkedTaker(workers) {
  return {
    expect: what =>
      Promise.any(workers.map(w => w.next('pickup', PICKUP_DEADLINE_MS, what))).catch(err => {
        throw err.errors?.[0] ?? err;
      }),
    cancel: () => workers.forEach(w => w.cancel('pickup')),
  };
}

// One Worker in this process (concurrency 1, as Baton's parked runner asks for one task)
// as the pickup taker: producer and worker share a process, as the submitter and the
// parked runner share the bench's process in benches/throughput/pickup.rs.
async function inProcessTaker(queueName, connection) {
  const entered = new Map();
  let waiter;
  const worker = new Worker(
    queueName,
    async job => {
      entered.set(job.id, now() - job.data.sentAt);
    },
    { connection, concurrency: 1 },
  );
  worker.on('completed', job => {
    const latencyMs = entered.get(job.id);
    entered.delete(job.id);
    waiter?.resolve({ id: job.id, latencyMs });
  });
  worker.on('failed', (job, err) => waiter?.reject(new Error(`job ${job?.id} failed: ${err?.message ?? err}`)));
  worker.on('error', err => log(`in-process worker: ${err?.message ?? err}`));
  await Promise.all([worker.waitUntilReady(), once(worker, 'ready')]);
  return {
    worker,
    expect: what =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out after ${PICKUP_DEADLINE_MS} ms waiting for ${what}`)), PICKUP_DEADLINE_MS);
        waiter = {
          timer,
          resolve: v => (clearTimeout(timer), resolve(v)),
          reject: e => (clearTimeout(timer), reject(e)),
        };
      }),
    cancel: () => {
      clearTimeout(waiter?.timer);
      waiter = undefined;
    },
  };
}

// Obliterates the queue and checks that none of its keys is left.
async function cleanUp(queue, redis) {
  await queue.obliterate({ force: true });
  const pattern = `${queue.toKey('')}*`;
  let left = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    left += keys.length;
    if (keys.length) await redis.del(...keys);
  } while (cursor !== '0');
  if (left) log(`obliterate left ${left} key(s) matching ${pattern}; deleted them`);
}

async function main() {
  const opts = options();
  const connection = connectionOptions(opts.redis);
  const bullmqVersion = JSON.parse(
    readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url), 'utf8'),
  ).version;
  const queueName = `baton-baseline-${Date.now().toString(36)}-${process.pid}`;

  // The counters' own connection (and the timestamps' reader): not one BullMQ uses.
  const redis = new IORedis({ ...connection, lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
  let lastError;
  redis.on('error', err => (lastError = err)); // surfaced by the commands that fail
  try {
    await redis.connect();
  } catch (err) {
    throw new Error(`cannot reach Redis at ${opts.redis}: ${(lastError ?? err).message}`);
  }
  const redisVersion = /^redis_version:(.*)$/m.exec(await redis.info('server'))?.[1]?.trim();

  const queue = new Queue(queueName, { connection });
  queue.on('error', err => log(`queue: ${err.message}`));
  const workers = [];
  let pickupWorker;
  let ok = false;
  try {
    await queue.waitUntilReady();
    log(`BullMQ ${bullmqVersion} on Node ${process.versions.node}, Redis ${redisVersion} at ${opts.redis}, queue ${queueName}`);
    for (let i = 0; i < opts.workers; i++) {
      workers.push(new WorkerProcess({ queue: queueName, connection, concurrency: opts.concurrency }));
    }
    await Promise.all(workers.map(w => w.next('ready', READY_DEADLINE_MS, 'a worker process to connect')));

    const drained = opts.drain > 0 ? await drain(opts, queue, redis, workers) : {};
    let forked = {};
    let inProcess = {};
    if (opts.pickups > 0) {
      // First to the drain's worker processes, idle now; then, with those closed, to a
      // worker in this process: the figure set beside Baton's (see inProcessTaker).
      if (opts.drain === 0) for (const w of workers) w.send('run');
      forked = await pickup(opts, queue, 'forked workers', forkedTaker(workers));
      await Promise.all(workers.map(w => w.close()));
      const taker = await inProcessTaker(queueName, connection);
      pickupWorker = taker.worker;
      inProcess = await pickup(opts, queue, 'worker in the producer process', taker);
      await pickupWorker.close();
    }

    await Promise.all(workers.map(w => w.close()));
    await cleanUp(queue, redis);
    ok = true;
    const round = (x, digits) => (typeof x === 'number' ? Number(x.toFixed(digits)) : null);
    const result = {
      drain_jobs: opts.drain,
      drain_per_s: round(drained.drain_per_s, 1),
      drain_cpu_ms_per_job: round(drained.drain_cpu_ms_per_job, 4),
      redis_cmds_per_job: round(drained.redis_cmds_per_job, 3),
      pickup_p50_ms: round(inProcess.p50, 3),
      pickup_p99_ms: round(inProcess.p99, 3),
      bullmq_version: bullmqVersion,
      node_version: process.versions.node,
      redis_version: redisVersion ?? null,
      workers: opts.workers,
      concurrency: opts.concurrency,
      redis_cpu_ms_per_job: round(drained.redis_cpu_ms_per_job, 4),
      redis_scripts_per_job: round(drained.redis_scripts_per_job, 3),
      bulk_add_per_s: round(drained.bulk_add_per_s, 1),
      bulk_add_redis_cmds_per_job: round(drained.bulk_add_redis_cmds_per_job, 3),
      pickups: opts.pickups,
      pickup_max_ms: round(inProcess.max, 3),
      pickup_add_p50_ms: round(inProcess.addP50, 3),
      pickup_forked_p50_ms: round(forked.p50, 3),
      pickup_forked_p99_ms: round(forked.p99, 3),
      pickup_forked_max_ms: round(forked.max, 3),
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    if (!ok) {
      for (const w of workers) w.kill();
      await pickupWorker?.close(true).catch(() => {});
      // Best effort, bounded: the queue's keys should not outlive a failed run.
      await Promise.race([cleanUp(queue, redis).catch(err => log(`could not obliterate ${queueName}: ${err.message}`)), sleep(30_000)]);
    }
    await queue.close().catch(() => {});
    redis.disconnect();
  }
}

main().then(
  () => process.exit(0),
  err => {
    console.error(`BullMQ baseline failed: ${err?.message ?? err}`);
    process.exit(1);
  },
);
