// Peer comparison: Tusk, graphile-worker, pg-boss and BullMQ (on Redis), one at a time on
// this machine, plus ceilings of bare SQL on the same PostgreSQL (bench/lib/ceilings.ts):
// a DELETE … SKIP LOCKED drain, the same keeping each job in a history table, and a
// server-side INSERT … SELECT generate_series into Tusk's jobs table. Per system: bulk
// enqueue rate, drain rate of one worker process with the system's defaults and with its
// tuned settings (printed beside it), enqueue→start latency on an idle worker, and the
// worker's peak RSS. Prints one table and the goal checks of this run.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { renderTable } from '../../src/cli/table.js';
import { VERSION } from '../../src/version.js';
import { CEILING_BATCH, CEILING_CONNECTIONS, drainCeiling, enqueueCeiling } from '../lib/ceilings.js';
import { percentile, saveResults, serverInfo, sleep, status, statusDone } from '../lib/env.js';
import { type FinalReport, startPeerWorker } from '../lib/peer-child.js';
import {
  type Mode,
  openPeer,
  type Payload,
  type Peer,
  PeerUnavailable,
  redisUrl,
  type StoreCounts,
  SYSTEMS,
  type System,
} from '../peers/index.js';

/** `ceiling`: the three bare-SQL rows. */
export type Target = System | 'ceiling';
export const TARGETS: readonly Target[] = [...SYSTEMS, 'ceiling'];
type Row = System | 'ceiling' | 'ceiling-history' | 'ceiling-enqueue';

export interface PeersOptions {
  url: string;
  /** Jobs per bulk enqueue and drain. */
  jobs: number;
  /** Jobs of the latency run. */
  latencyJobs: number;
  /** Systems to run, in the fixed order of TARGETS. */
  only: Target[];
  /** Give up on a drain after this long (rate from what finished). */
  drainTimeoutMs: number;
  /** How long the latency run waits for its last jobs after the last enqueue. */
  latencyWaitMs: number;
  /** Exit code 1 when a goal is not met. */
  strict: boolean;
}

const CHUNK = 10_000;
const LATENCY_GAP_MS = 5;
const LABEL: Record<Row, string> = {
  tusk: 'Tusk',
  graphile: 'graphile-worker',
  pgboss: 'pg-boss',
  bullmq: 'BullMQ (Redis)',
  ceiling: 'bare DELETE ceiling',
  'ceiling-history': 'DELETE ceiling keeping history',
  'ceiling-enqueue': 'INSERT…SELECT generate_series ceiling',
};

interface DrainResult {
  mode: Mode;
  waiting: number;
  target: number;
  /** Finished according to the store. */
  done: number;
  ms: number;
  /** From the worker's start to its first job's start (included in ms). */
  firstJobMs: number | null;
  rate: number;
  /** Stopped by the system's cap (or the safety timeout) before all `waiting` finished. */
  capped: boolean;
  capReason: string | null;
  handled: number;
  /** Worker process peak RSS (null for the ceiling, which has none). */
  rssPeakMb: number | null;
  rssBaseMb: number | null;
  store: StoreCounts;
  verified: boolean;
  errors: string[];
}

/** Percentiles are Infinity (null in the results file) where they fall on jobs that did not start. */
interface LatencyResult {
  jobs: number;
  started: number;
  waitMs: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  rssPeakMb: number;
  latenciesMs: number[];
}

interface SystemResult {
  target: Row;
  label: string;
  skipped: string | null;
  failed: string | null;
  settings: unknown;
  /** The settings of each mode in a few words (a ceiling's in `tuned`). */
  describe: Partial<Record<Mode, string>>;
  bulk: { runs: Array<{ jobs: number; ms: number }>; rate: number } | null;
  drain: Partial<Record<Mode, DrainResult>>;
  latency: LatencyResult | null;
  rssPeakMb: number | null;
  /** The worker process's RSS before the system's library loaded (node, tsx, pg). */
  rssBaseMb: number | null;
  notes: string[];
}

const now = () => performance.timeOrigin + performance.now();

function emptyResult(target: Row): SystemResult {
  return {
    target,
    label: LABEL[target],
    skipped: null,
    failed: null,
    settings: null,
    describe: {},
    bulk: null,
    drain: {},
    latency: null,
    rssPeakMb: null,
    rssBaseMb: null,
    notes: [],
  };
}

async function bulkEnqueue(peer: Peer, n: number, say: (s: string) => void): Promise<{ jobs: number; ms: number }> {
  const chunks: Payload[][] = [];
  for (let i = 0; i < n; i += CHUNK) {
    chunks.push(Array.from({ length: Math.min(CHUNK, n - i) }, (_, k) => ({ n: i + k })));
  }
  let ms = 0;
  let added = 0;
  for (const chunk of chunks) {
    const t0 = performance.now();
    await peer.bulkEnqueue(chunk);
    ms += performance.now() - t0;
    added += chunk.length;
    say(`bulk enqueue ${added.toLocaleString('en')}/${n.toLocaleString('en')}`);
  }
  return { jobs: n, ms };
}

async function drain(peer: Peer, mode: Mode, o: PeersOptions, say: (s: string) => void): Promise<DrainResult> {
  const cap = peer.drainCap?.[mode];
  const target = cap ? Math.min(o.jobs, cap.jobs) : o.jobs;
  const maxMs = cap ? Math.min(cap.ms, o.drainTimeoutMs) : o.drainTimeoutMs;
  const child = startPeerWorker({ system: peer.system, mode, target, maxMs }, o.url);
  let final: FinalReport | null = null;
  const tick = setInterval(
    () => say(`drain ${mode} ${child.handled.toLocaleString('en')}/${target.toLocaleString('en')}`),
    500,
  );
  try {
    await child.ready;
    await child.drained;
  } finally {
    clearInterval(tick);
    final = await child.stop().catch((error: Error) => {
      throw new Error(`${peer.label} ${mode} drain: ${error.message}`);
    });
  }
  if (final.done === null || final.ms === null) throw new Error(`${peer.label} ${mode} drain: no result`);
  const store = await peer.counts();
  const capped = final.capped || target < o.jobs;
  // all jobs of a full drain finished and none left; a capped drain left the rest waiting
  const verified = capped
    ? store.remaining <= o.jobs - final.done && (store.completed === null || store.completed >= final.done)
    : store.remaining === 0 && (store.completed === null || store.completed === o.jobs);
  let capReason: string | null = null;
  if (capped) {
    capReason = final.capped
      ? `stopped after ${(final.ms / 1000).toFixed(1)} s with ${final.done.toLocaleString('en')} of ${target.toLocaleString('en')} done`
      : `capped at ${target.toLocaleString('en')} of ${o.jobs.toLocaleString('en')} jobs`;
  }
  return {
    mode,
    waiting: o.jobs,
    target,
    done: final.done,
    ms: final.ms,
    firstJobMs: final.firstJobMs,
    rate: (final.done / final.ms) * 1000,
    capped,
    capReason,
    handled: final.handled,
    rssPeakMb: final.rssPeakMb,
    rssBaseMb: final.rssBaseMb,
    store,
    verified,
    errors: final.errors,
  };
}

async function latency(peer: Peer, o: PeersOptions, say: (s: string) => void): Promise<LatencyResult> {
  const child = startPeerWorker({ system: peer.system, mode: 'defaults', latency: true }, o.url);
  let final: FinalReport;
  try {
    await child.ready;
    // one job not measured, to warm both sides' first-call paths; then idle, waiting for work
    await peer.enqueueOne({ n: -1 });
    await sleep(1000);
    const expected = o.latencyJobs + 1;
    for (let i = 0; i < o.latencyJobs; i++) {
      const t = now();
      await peer.enqueueOne({ t });
      if (i % 50 === 0) say(`latency: enqueued ${i}/${o.latencyJobs}, started ${child.handled}`);
      await sleep(LATENCY_GAP_MS);
    }
    const deadline = performance.now() + o.latencyWaitMs;
    while (child.handled < expected && performance.now() < deadline) {
      say(`latency: started ${child.handled}/${expected}`);
      await sleep(100);
    }
  } finally {
    final = await child.stop();
  }
  const values = final.latencies ?? [];
  // jobs that did not start in time count as slower than any that did
  const all = [...values, ...Array<number>(Math.max(0, o.latencyJobs - values.length)).fill(Number.POSITIVE_INFINITY)];
  return {
    jobs: o.latencyJobs,
    started: values.length,
    waitMs: o.latencyWaitMs,
    p50: percentile(all, 50) ?? Number.NaN,
    p95: percentile(all, 95) ?? Number.NaN,
    p99: percentile(all, 99) ?? Number.NaN,
    max: percentile(all, 100) ?? Number.NaN,
    rssPeakMb: final.rssPeakMb,
    latenciesMs: values,
  };
}

async function runSystem(system: System, o: PeersOptions, pool: pg.Pool): Promise<SystemResult> {
  const result = emptyResult(system);
  const peer = await openPeer(system, { url: o.url, redisUrl: redisUrl(), pool });
  result.settings = peer.settings;
  result.describe = peer.describe;
  const say = (what: string) => status(`peers · ${peer.label} · ${what}`);
  const runs: Array<{ jobs: number; ms: number }> = [];
  try {
    for (const mode of ['defaults', 'tuned'] as const) {
      // the same starting state for every drain: new storage, N jobs, fresh statistics
      say('setting up');
      await peer.setup();
      runs.push(await bulkEnqueue(peer, o.jobs, say));
      say('VACUUM ANALYZE');
      await peer.vacuum();
      const d = await drain(peer, mode, o, say);
      result.drain[mode] = d;
      if (d.capReason) result.notes.push(`drain ${mode}: ${d.capReason}; rate from what finished`);
      if (!d.verified) {
        result.notes.push(`drain ${mode}: the store does not confirm it: ${JSON.stringify(d.store)}`);
        process.exitCode = 1;
      }
      for (const e of d.errors) result.notes.push(`drain ${mode}: worker error: ${e}`);
    }
    result.bulk = {
      runs,
      rate: (runs.reduce((a, r) => a + r.jobs, 0) / runs.reduce((a, r) => a + r.ms, 0)) * 1000,
    };
    const drains = Object.values(result.drain);
    result.rssPeakMb = Math.max(...drains.map((d) => d.rssPeakMb ?? 0));
    result.rssBaseMb = Math.max(...drains.map((d) => d.rssBaseMb ?? 0));

    say('setting up the latency run');
    await peer.setup();
    await peer.vacuum();
    result.latency = await latency(peer, o, say);
    if (result.latency.started < result.latency.jobs) {
      result.notes.push(
        `latency: ${result.latency.started} of ${result.latency.jobs} jobs started within ` +
          `${o.latencyWaitMs / 1000} s of the last enqueue; the rest count as slower (">")`,
      );
    }
  } catch (error) {
    if (error instanceof PeerUnavailable) {
      result.skipped = error.message;
    } else {
      result.failed = (error as Error).stack ?? String(error);
      process.exitCode = 1;
    }
  } finally {
    await peer.teardown().catch(() => {});
    await peer.close().catch(() => {});
    statusDone();
  }
  return result;
}

/** A drain ceiling: bare DELETE, or keeping history (see bench/lib/ceilings.ts). */
async function runDrainCeiling(o: PeersOptions, keepHistory: boolean): Promise<SystemResult> {
  const result = emptyResult(keepHistory ? 'ceiling-history' : 'ceiling');
  result.settings = { connections: CEILING_CONNECTIONS, batch: CEILING_BATCH, keepHistory };
  result.describe = {
    tuned: keepHistory
      ? `${CEILING_CONNECTIONS} conns × lock ${CEILING_BATCH}, DELETE→INSERT history`
      : `${CEILING_CONNECTIONS} conns × DELETE ${CEILING_BATCH} SKIP LOCKED`,
  };
  const say = (what: string) => status(`peers · ${result.label} · ${what}`);
  try {
    const d = await drainCeiling(o.url, o.jobs, keepHistory, say);
    result.drain.tuned = {
      mode: 'tuned',
      waiting: o.jobs,
      target: o.jobs,
      done: d.done,
      ms: d.ms,
      firstJobMs: null,
      rate: (d.done / d.ms) * 1000,
      capped: false,
      capReason: null,
      handled: d.done,
      rssPeakMb: null,
      rssBaseMb: null,
      store: { completed: d.history ?? d.done, remaining: d.remaining },
      verified: d.remaining === 0 && d.done === o.jobs && (d.history === null || d.history === o.jobs),
      errors: [],
    };
    if (!result.drain.tuned.verified) {
      result.notes.push(`the store does not confirm the drain: ${JSON.stringify(d)}`);
      process.exitCode = 1;
    }
  } catch (error) {
    result.failed = (error as Error).stack ?? String(error);
    process.exitCode = 1;
  } finally {
    statusDone();
  }
  return result;
}

/** The enqueue ceiling: as many loads and chunks as the peers' bulk enqueue. */
async function runEnqueueCeiling(o: PeersOptions): Promise<SystemResult> {
  const result = emptyResult('ceiling-enqueue');
  const loads = 2;
  result.settings = { chunk: CHUNK, loads };
  result.describe = { tuned: `${CHUNK.toLocaleString('en')} rows per statement, Tusk's jobs table` };
  const say = (what: string) => status(`peers · ${result.label} · ${what}`);
  try {
    const e = await enqueueCeiling(o.url, o.jobs, CHUNK, loads, say);
    result.bulk = {
      runs: e.runs,
      rate: (e.runs.reduce((a, r) => a + r.jobs, 0) / e.runs.reduce((a, r) => a + r.ms, 0)) * 1000,
    };
    if (e.rows.some((n) => n !== o.jobs)) {
      result.notes.push(`the jobs table holds ${e.rows.join(', ')} rows after the loads, not ${o.jobs}`);
      process.exitCode = 1;
    }
  } catch (error) {
    result.failed = (error as Error).stack ?? String(error);
    process.exitCode = 1;
  } finally {
    statusDone();
  }
  return result;
}

function packageVersion(name: string): string | null {
  try {
    const file = new URL(`../../node_modules/${name}/package.json`, import.meta.url);
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
  } catch {
    return null;
  }
}

const rate = (v: number | undefined) => (v === undefined ? null : v < 10 ? Number(v.toFixed(2)) : Math.round(v));
const ms = (v: number | undefined, waitMs: number) =>
  v === undefined ? null : v === Number.POSITIVE_INFINITY ? `>${waitMs}` : v < 10 ? v.toFixed(2) : v.toFixed(1);
const num = (v: number) => (v < 10 ? v.toFixed(2) : v.toFixed(1));

/**
 * renderTable, with every column but the first and the last (text) right-aligned, also
 * where it mixes numbers and text.
 */
function table(headers: string[], rows: Array<Array<string | number | null>>): string {
  const cells = rows.map((r) => r.map((c) => (c === null ? '-' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const last = headers.length - 1;
  const right = (c: string, i: number) => (i === 0 || i === last ? c : c.padStart(widths[i] ?? 0));
  return renderTable(
    headers.map(right),
    cells.map((r) => r.map(right)),
  );
}

function goalLines(results: SystemResult[]): Array<{ text: string; met: boolean | null }> {
  const by = (t: Row) => results.find((r) => r.target === t && !r.skipped && !r.failed);
  const tusk = by('tusk');
  const gw = by('graphile');
  const history = by('ceiling-history');
  const insert = by('ceiling-enqueue');
  const lines: Array<{ text: string; met: boolean | null }> = [];
  const ratio = (name: string, a: number | undefined, b: number | undefined, goal: number) => {
    if (a === undefined || b === undefined || !(b > 0)) {
      lines.push({ text: `${name} (goal ≥ ${goal}): n/a, not measured in this run`, met: null });
      return null;
    }
    const r = a / b;
    const met = r >= goal;
    lines.push({
      text: `${name} = ${rate(a)} / ${rate(b)} = ${r.toFixed(2)} (goal ≥ ${goal}): ${met ? 'met' : 'NOT met'}`,
      met,
    });
    return met;
  };
  // Tusk keeps every finished job, so its drain is held to the ceiling that does too
  ratio('Tusk drain tuned ÷ DELETE ceiling keeping history', tusk?.drain.tuned?.rate, history?.drain.tuned?.rate, 0.5);
  ratio('Tusk drain defaults ÷ graphile-worker drain tuned', tusk?.drain.defaults?.rate, gw?.drain.tuned?.rate, 2);
  ratio('Tusk bulk enqueue ÷ INSERT…SELECT generate_series ceiling', tusk?.bulk?.rate, insert?.bulk?.rate, 0.6);
  const tl = tusk?.latency;
  const gl = gw?.latency;
  if (tl && gl) {
    const met = tl.p50 <= gl.p50;
    lines.push({
      text: `Tusk latency p50 ${ms(tl.p50, tl.waitMs)} ms ≤ graphile-worker p50 ${ms(gl.p50, gl.waitMs)} ms: ${met ? 'met' : 'NOT met'}`,
      met,
    });
  } else lines.push({ text: 'Tusk latency p50 ≤ graphile-worker p50: n/a, not measured in this run', met: null });
  if (tl) {
    const met = tl.p99 <= 10;
    lines.push({ text: `Tusk latency p99 ${ms(tl.p99, tl.waitMs)} ms ≤ 10 ms: ${met ? 'met' : 'NOT met'}`, met });
  } else lines.push({ text: 'Tusk latency p99 ≤ 10 ms: n/a, not measured in this run', met: null });
  return lines;
}

export async function peers(o: PeersOptions): Promise<boolean> {
  const pool = new pg.Pool({ connectionString: o.url, max: 4 });
  const results: SystemResult[] = [];
  try {
    const server = await serverInfo(o.url);
    for (const target of TARGETS) {
      if (!o.only.includes(target)) continue;
      if (target !== 'ceiling') results.push(await runSystem(target, o, pool));
      else {
        results.push(await runDrainCeiling(o, false));
        results.push(await runDrainCeiling(o, true));
        results.push(await runEnqueueCeiling(o));
      }
    }

    console.log(
      `\nPeer comparison: ${o.jobs.toLocaleString('en')} no-op jobs per bulk enqueue and drain, ` +
        `${o.latencyJobs.toLocaleString('en')} latency jobs ${LATENCY_GAP_MS} ms apart; one worker process; ` +
        `PostgreSQL ${server.server_version}, ${o.jobs < 100_000 ? 'small run' : 'full run'}\n`,
    );
    const rows = results.map((r) => {
      if (r.skipped || r.failed) return [r.label, null, null, null, null, null, null, null, r.describe.tuned ?? null];
      const l = r.latency;
      return [
        r.label,
        rate(r.bulk?.rate),
        rate(r.drain.defaults?.rate) === null
          ? null
          : `${rate(r.drain.defaults?.rate)}${r.drain.defaults?.capped ? '*' : ''}`,
        rate(r.drain.tuned?.rate) === null ? null : `${rate(r.drain.tuned?.rate)}${r.drain.tuned?.capped ? '*' : ''}`,
        l ? ms(l.p50, l.waitMs) : null,
        l ? ms(l.p95, l.waitMs) : null,
        l ? ms(l.p99, l.waitMs) : null,
        r.rssPeakMb === null ? null : num(r.rssPeakMb),
        r.describe.tuned ?? null,
      ];
    });
    console.log(
      table(
        [
          'system',
          'bulk enqueue jobs/s',
          'drain defaults jobs/s',
          'drain tuned jobs/s',
          'latency p50 ms',
          'p95 ms',
          'p99 ms',
          'worker peak RSS MB',
          'tuned settings',
        ],
        rows,
      ),
    );

    const notes: string[] = [];
    for (const r of results) {
      if (r.skipped) notes.push(`${r.label}: skipped: ${r.skipped}`);
      if (r.failed) notes.push(`${r.label}: FAILED: ${r.failed.split('\n')[0]}`);
      for (const n of r.notes) notes.push(`${r.label}: ${n}`);
    }
    const defaults = results.filter((r) => r.describe.defaults).map((r) => `${r.label}: ${r.describe.defaults}`);
    const bases = results.map((r) => r.rssBaseMb).filter((v): v is number => v !== null);
    const how: Array<[string, string]> = [
      [
        'bulk enqueue',
        `chunks of ${CHUNK.toLocaleString('en')} through each system's bulk API, timed at the producer, ` +
          'over its two loads (one before each drain)',
      ],
      [
        'drain',
        'one worker process, from its start until the store shows all jobs finished; each drain starts ' +
          'from new storage holding just the jobs loaded, after VACUUM ANALYZE',
      ],
      ['defaults', defaults.length ? defaults.join('; ') : '-'],
      [
        'tuned',
        "each system's settings for throughput as its docs give them (last column; the doc sections " +
          'followed are named in bench/peers/*.ts)',
      ],
      [
        'ceilings',
        `bare SQL from ${CEILING_CONNECTIONS} connections, ${CEILING_BATCH} jobs a batch: DELETE … WHERE id = ANY ` +
          '(ARRAY(SELECT … FOR UPDATE SKIP LOCKED)); keeping history: BEGIN, SELECT … FOR UPDATE SKIP LOCKED, ' +
          'WITH d AS (DELETE … RETURNING …) INSERT INTO job_history SELECT … FROM d, COMMIT; enqueue: ' +
          `INSERT … SELECT … generate_series into a Tusk-migrated jobs table, ${CHUNK.toLocaleString('en')} ` +
          'rows a statement, two loads',
      ],
      ['latency', 'idle worker with defaults; enqueue (one at a time) → handler start'],
      [
        'RSS',
        'VmHWM of the worker process, max of its two drains' +
          (bases.length
            ? `; includes ${num(Math.min(...bases))} MB held before the system's library loads ` +
              '(node + tsx + pg; plain node alone is about 40 MB)'
            : ''),
      ],
    ];
    console.log(`\nHow measured:\n${how.map(([k, v]) => `  ${k.padEnd(13)} ${v}`).join('\n')}`);
    if (results.some((r) => r.drain.defaults?.capped || r.drain.tuned?.capped)) {
      console.log('  * a capped drain: see the notes');
    }
    if (notes.length) console.log(`\nNotes:\n${notes.map((n) => `  ${n}`).join('\n')}`);

    const goals = goalLines(results);
    console.log(`\nGoals (this run):\n${goals.map((g) => `  ${g.text}`).join('\n')}`);

    const file = await saveResults('peers', {
      options: { ...o, url: undefined },
      server,
      versions: {
        tusk: VERSION,
        'graphile-worker': packageVersion('graphile-worker'),
        'pg-boss': packageVersion('pg-boss'),
        bullmq: packageVersion('bullmq'),
        ioredis: packageVersion('ioredis'),
        node: process.version,
      },
      results,
      goals,
    });
    console.log(`\nresults: ${file}`);
    const ok = goals.every((g) => g.met !== false);
    if (o.strict && !ok) process.exitCode = 1;
    return ok;
  } finally {
    await pool.end();
  }
}
