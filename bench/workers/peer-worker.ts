// One worker process of the peer comparison (and of the scaling suite): runs the worker
// of `--system` in `--mode` with a no-op handler, on the jobs the parent put in the store.
//
// stdout, one line each:
//   ready                         the worker has started (the drain clock started just before it)
//   progress <n>                  jobs handled so far (every 250 ms while it changes)
//   {"event":"drained",...}       with --target: the store shows `target` more jobs finished
//                                 (or --max-ms passed): { done, ms, firstJobMs, capped }
//   {"event":"final",...}         on SIGTERM, after a graceful stop: { done, ms, firstJobMs, capped,
//                                 handled, rssPeakMb, rssBaseMb, errors, latencies? }; then
//                                 exit 0 (rssBaseMb: peak before the system's library loaded)
//
// With --latency, each handler start records now − payload.t (both are
// `performance.timeOrigin + performance.now()`, comparable across processes) in ms.
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { peakRssMb } from '../lib/rss.js';
import {
  type Mode,
  openPeer,
  type Payload,
  type RunningWorker,
  redisUrl,
  SYSTEMS,
  type System,
} from '../peers/index.js';

const { values } = parseArgs({
  options: {
    system: { type: 'string' },
    mode: { type: 'string', default: 'defaults' },
    schema: { type: 'string' },
    // jobs to finish before reporting `drained`; 0: none (latency runs)
    target: { type: 'string', default: '0' },
    // give up on the target after this long and report what finished; 0: never
    'max-ms': { type: 'string', default: '0' },
    latency: { type: 'boolean', default: false },
  },
});
const system = values.system as System;
const mode = values.mode as Mode;
if (!SYSTEMS.includes(system)) throw new Error(`--system must be one of ${SYSTEMS.join(', ')}`);
if (mode !== 'defaults' && mode !== 'tuned') throw new Error('--mode must be defaults or tuned');
const target = Number(values.target);
const maxMs = Number(values['max-ms']);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const now = () => performance.timeOrigin + performance.now();

// what this process holds before the system's library is loaded (node, tsx, pg)
const baseRssMb = peakRssMb();
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
const peer = await openPeer(system, {
  url: process.env.DATABASE_URL as string,
  redisUrl: redisUrl(),
  pool,
  ...(values.schema ? { schema: values.schema } : {}),
});

let handled = 0;
let t0 = 0;
let firstJobMs: number | null = null;
const latencies: number[] = [];
const onJob = values.latency
  ? (payload: Payload) => {
      if (typeof payload?.t === 'number') latencies.push(Number((now() - payload.t).toFixed(3)));
      handled++;
    }
  : () => {
      if (handled++ === 0) firstJobMs = performance.now() - t0;
    };

let worker: RunningWorker | null = null;
let result: { done: number; ms: number; firstJobMs: number | null; capped: boolean } | null = null;
const errors: string[] = [];
let stopping = false;

async function watchDrain(base: number): Promise<void> {
  for (;;) {
    const over = maxMs > 0 && performance.now() - t0 >= maxMs;
    if (handled >= target || over) {
      // handled is not finished: finishes may be batched, so the store has the last word
      const done = (await peer.progress()) - base;
      const ms = performance.now() - t0;
      if (done >= target || over) {
        result = { done, ms, firstJobMs, capped: done < target };
        console.log(JSON.stringify({ event: 'drained', ...result }));
        return;
      }
    }
    await sleep(handled >= target ? 10 : 25);
  }
}

async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  try {
    await worker?.stop();
    await peer.close();
    await pool.end();
  } catch (error) {
    errors.push(`stop: ${(error as Error).message}`);
  }
  console.log(
    JSON.stringify({
      event: 'final',
      ...(result ?? { done: null, ms: null, firstJobMs, capped: false }),
      handled,
      rssPeakMb: Number(peakRssMb().toFixed(1)),
      rssBaseMb: Number(baseRssMb.toFixed(1)),
      errors,
      ...(values.latency ? { latencies } : {}),
    }),
  );
  process.exit(0);
}

process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());

async function main(): Promise<void> {
  const base = target > 0 ? await peer.progress() : 0;
  t0 = performance.now();
  worker = await peer.startWorker(mode, onJob);
  console.log('ready');
  let shown = -1;
  setInterval(() => {
    if (handled === shown || stopping) return;
    shown = handled;
    console.log(`progress ${shown}`);
  }, 250).unref();
  if (target > 0) await watchDrain(base);
}

main().catch((error) => {
  console.error(`peer-worker ${system}/${mode}:`, error);
  process.exit(1);
});
