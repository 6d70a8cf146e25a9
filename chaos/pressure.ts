// The pressure run: a steady producer near 70 % of capacity, and phases of the classic
// PostgreSQL-queue killers — an idle transaction pinning the xmin horizon, REPEATABLE READ
// analytics, 1.5× overload, a pg_terminate_backend storm with 300 idle connections — each
// followed by a recovery window. Per phase: completion rate, enqueue→start p50/p99, dead
// tuples, backlog, what Tusk's connections waited on; and at the end of each phase, per
// relation the claim and completion touch, its rows, dead tuples and sizes (bloat seen,
// not inferred).
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import pg from 'pg';
import { renderTable } from '../src/cli/table.js';
import { startEmbedded } from '../src/db/embedded.js';
import { isConnectionError } from '../src/errors.js';
import { dropSchema } from '../src/migrate/migrate.js';
import { Tusk } from '../src/tusk.js';
import { Fleet, namedUrl } from './fleet.js';

export interface PressureOptions {
  workers: number;
  concurrency: number;
  /** Length of the clean, analytics, overload and storm phases. */
  phaseMs: number;
  /** How long the idle transaction pins the horizon. */
  pinnedMs: number;
  /** Longest wait for the figures to come back after a stress. */
  recoveryMaxMs: number;
  /** How long capacity is measured (a producer enqueueing flat out). */
  calibrationMs: number;
  dir: string;
  schema: string;
  /** The stresses to run, in their fixed order (default: all four). */
  phases?: ReadonlySet<Stress>;
  /** Per phase, the statements that took the server's time (pg_stat_statements, nested ones counted). */
  statements?: boolean;
  /** Server settings of the run's own server, over its defaults (e.g. `io_method: 'sync'`). */
  serverSettings?: Readonly<Record<string, string>>;
  /** From the first stress on, another process keeps one CPU busy this share (percent) of the time. */
  busyPercent?: number;
  /** A file to write every sample to, a JSON line each, with each second's started and produced jobs. */
  timeline?: string;
  progress?: (line: string) => void;
}

/** What the observer reads twice a second. */
export interface Sample {
  at: number;
  deadJobs: number;
  deadHistory: number;
  backlog: number;
  /** What each of the workers' active connections waits on, and in which of Tusk's functions. */
  waits: string[];
  /** The claims running, and how long the oldest has run (ms). */
  claims: number;
  oldestClaimMs: number;
  /** The autovacuum's phase on `jobs`, if one runs. */
  vacuum: string | null;
  /** The machine's CPUs' busy share since the previous sample (0–1); null if unknown. */
  cpu: number | null;
  /** Buffers the checkpointer wrote since the previous sample; null if unknown. */
  checkpointBuffers: number | null;
}

/** The machine's CPU time from /proc/stat: busy and total jiffies, or null off Linux. */
function machineCpu(): { busy: number; total: number } | null {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
    const total = fields.reduce((a, b) => a + b, 0);
    // idle and iowait are the 4th and 5th fields
    return { busy: total - (fields[3] ?? 0) - (fields[4] ?? 0), total };
  } catch {
    return null;
  }
}

/** The stresses, in the order they run. */
export const STRESSES = ['pinned', 'scanners', 'overload', 'storm'] as const;
export type Stress = (typeof STRESSES)[number];

/** Latency histogram bounds (ms), as in pressure-tasks.mjs. */
const BOUNDS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000, Number.POSITIVE_INFINITY];
const TENANTS = 4;

interface Second {
  started: number;
  counts: number[];
}

interface Window {
  from: number;
  to: number;
}

export interface PhaseResult {
  phase: string;
  seconds: number;
  producedPerSec: number;
  startedPerSec: number;
  p50: number;
  p99: number;
  deadJobsMax: number;
  deadHistoryMax: number;
  backlogMax: number;
  waits: string;
  recoveredMs: number | null;
  /** Per relation at the end of the phase (job_history's partitions folded into one). */
  relations: RelationState[];
  /** With `statements`: the statements that took most of the server's time in the phase. */
  statements: StatementTime[];
}

export interface StatementTime {
  query: string;
  calls: number;
  totalMs: number;
  meanMs: number;
}

export interface RelationState {
  relation: string;
  live: number;
  dead: number;
  heapMb: number;
  indexMb: number;
}

/**
 * The server's settings: PostgreSQL's defaults, and room for the 300 idle connections.
 * (The scanners' phase measured with 128 MB, 256 MB and 1 GB of shared buffers: see
 * docs/design/storage.md.)
 */
const SERVER_SETTINGS = { max_connections: '500' };

/** With `statements`: every statement counted, those inside Tusk's functions too. */
const STATEMENT_SETTINGS = {
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'all',
  'pg_stat_statements.max': '2000',
};

/** Goals of the run: share of the clean rate under each stress, and the recovery bound. */
const GOALS = { pinnedShare: 0.9, pinnedP99Ms: 1000, scannersShare: 0.9, recoveryMs: 30_000 };

export interface PressureReport {
  ok: boolean;
  failures: string[];
  capacity: number;
  rate: number;
  phases: PhaseResult[];
  /** What the REPEATABLE READ sessions did. */
  scanners: ScannerLoad | null;
  /** The server's version and the settings that shape the run. */
  server: string;
}

export interface ScannerLoad {
  sessions: number;
  scans: number;
  /** Mean time of one scan (the jobs count and the history's last 10 minutes), ms. */
  meanScanMs: number;
  /** Share of the phase the sessions spent scanning, summed over sessions (4 = all four busy). */
  busy: number;
}

export async function runPressure(o: PressureOptions): Promise<PressureReport> {
  const say = o.progress ?? (() => {});
  // a server of its own, started with room for the 300 idle connections
  const settings = {
    ...SERVER_SETTINGS,
    ...(o.statements ? STATEMENT_SETTINGS : {}),
    ...o.serverSettings,
  };
  let server = await startEmbedded({ dir: o.dir, settings });
  if (!server.started) {
    await server.stop();
    server = await startEmbedded({ dir: o.dir, settings });
  }
  const url = server.connectionString;
  const observer = new pg.Pool({ connectionString: url, max: 2, application_name: 'pressure-observer' });
  observer.on('error', () => {});
  const q = (sql: string, values?: unknown[]) => observer.query(sql.replaceAll('$schema', `"${o.schema}"`), values);
  const seconds = new Map<number, Second>();
  const fleet = new Fleet({
    url,
    schema: o.schema,
    concurrency: o.concurrency,
    leaseMs: 30_000,
    tasks: new URL('./pressure-tasks.mjs', import.meta.url).pathname,
    name: 'pressure-w',
    onLine: (line) => {
      let r: { at: number; started: number; counts: number[] };
      try {
        r = JSON.parse(line);
      } catch {
        return;
      }
      const key = Math.floor(r.at / 1000);
      const s = seconds.get(key) ?? { started: 0, counts: new Array(BOUNDS.length).fill(0) };
      s.started += r.started;
      r.counts.forEach((c, i) => {
        s.counts[i] = (s.counts[i] ?? 0) + c;
      });
      seconds.set(key, s);
    },
  });
  const producer = new Tusk({
    connectionString: namedUrl(url, 'pressure-producer'),
    schema: o.schema,
    logger: false,
    maxConnections: 4,
  });
  const samples: Sample[] = [];
  const produced = new Map<number, number>();
  const failures: string[] = [];
  const phases: PhaseResult[] = [];
  let scanners: ScannerLoad | null = null;
  let serverLine = '';
  let stopSampling = () => {};
  let busy: ChildProcess | null = null;
  try {
    say('pressure · setting up');
    await dropSchema(observer, o.schema);
    await producer.migrate();
    if (o.statements) await q('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    serverLine = (
      await q(
        `SELECT format('PostgreSQL %s (embedded); shared_buffers %s, work_mem %s, maintenance_work_mem %s, data checksums %s, synchronous_commit %s, io_method %s',
                current_setting('server_version'), current_setting('shared_buffers'), current_setting('work_mem'),
                current_setting('maintenance_work_mem'), current_setting('data_checksums'),
                current_setting('synchronous_commit'), coalesce(current_setting('io_method', true), 'sync')) AS s`,
      )
    ).rows[0]?.s;
    for (let slot = 0; slot < o.workers; slot++) fleet.start(slot);
    stopSampling = sample(q, o.schema, samples);
    await sleep(2000);

    // capacity: the workers' rate with a backlog kept at ~50 000 jobs by a producer
    // (enqueueing takes its share of the machine too); then the backlog drains
    say('pressure · measuring capacity');
    const waiting = async () =>
      Number((await q("SELECT count(*) AS n FROM $schema.jobs WHERE state = 'available'")).rows[0]?.n);
    const calibrationStart = Date.now();
    let from = 0;
    while (Date.now() - calibrationStart < o.calibrationMs + 3000) {
      if (from === 0 && Date.now() - calibrationStart > 3000) from = Date.now(); // after a warm-up
      if ((await waiting()) < 50_000) {
        const t = Date.now();
        await producer.enqueueMany(
          Array.from({ length: 5000 }, (_, k) => ({ task: 'work', tenant: `t${k % TENANTS}`, payload: { t } })),
        );
      } else {
        await sleep(20);
      }
    }
    const capacity = summarize('', { from, to: Date.now() }, seconds, produced, samples, null).startedPerSec;
    while ((await waiting()) > 0) await sleep(200);
    await sleep(2000);
    let rate = Math.round(capacity * 0.7);
    const load = new Producer(producer, produced, rate);
    load.start();

    const statements = o.statements ? new StatementClock(q) : null;
    await statements?.lap();
    const measure = async (phase: string, w: Window, recoveredMs: number | null = null): Promise<PhaseResult> => {
      const r = summarize(phase, w, seconds, produced, samples, recoveredMs);
      r.relations = await relationStates(q, o.schema).catch(() => []);
      r.statements = (await statements?.lap()) ?? [];
      phases.push(r);
      say(`pressure · ${phase}: ${Math.round(r.startedPerSec)} jobs/s, p99 ${bound(r.p99)} ms`);
      return r;
    };
    const run = async (ms: number) => {
      const from = Date.now();
      while (Date.now() - from < ms) {
        await sleep(500);
        say(`pressure · ${Math.round((Date.now() - from) / 1000)} / ${Math.round(ms / 1000)} s`);
      }
      return { from, to: Date.now() };
    };

    // clean, at 70 % of capacity (lowered if the workers do not keep up)
    let clean = await measure('clean', await run(o.phaseMs));
    for (let i = 0; i < 2 && clean.startedPerSec < 0.95 * clean.producedPerSec; i++) {
      phases.pop();
      rate = Math.round(rate * 0.8);
      load.rate = rate;
      await run(10_000); // let the backlog go
      await statements?.lap();
      clean = await measure('clean', await run(o.phaseMs));
    }
    const recovered = (w: Window) => {
      const r = summarize('', w, seconds, produced, samples, null);
      return (
        r.startedPerSec >= 0.95 * r.producedPerSec &&
        r.p99 <= Math.max(2 * clean.p99, 100) &&
        r.backlogMax <= Math.max(2 * clean.backlogMax, rate)
      );
    };
    const recover = async (phase: string) => {
      const from = Date.now();
      while (Date.now() - from < o.recoveryMaxMs) {
        const w = await run(5000);
        if (recovered(w)) {
          const r = await measure(`${phase}: recovery`, { from, to: w.to }, w.to - from);
          if (w.to - from > GOALS.recoveryMs) {
            failures.push(
              `${phase}: back to the clean figures after ${Math.round((w.to - from) / 1000)} s (goal ≤ 30 s)`,
            );
          }
          return r;
        }
      }
      const r = await measure(`${phase}: recovery`, { from, to: Date.now() }, null);
      failures.push(`${phase}: not back to the clean figures within ${o.recoveryMaxMs / 1000} s (goal ≤ 30 s)`);
      return r;
    };

    const runs = (stress: Stress) => o.phases?.has(stress) ?? true;
    if (o.busyPercent) busy = startBusy(o.busyPercent);

    // 1. an idle transaction holding an XID pins the xmin horizon
    if (runs('pinned')) {
      const pin = new pg.Client({ connectionString: url, application_name: 'pressure-pin' });
      await pin.connect();
      await pin.query('BEGIN');
      await pin.query('SELECT txid_current()');
      const r = await measure('idle in transaction (xmin pinned)', await run(o.pinnedMs));
      await pin.query('COMMIT');
      await pin.end();
      if (r.startedPerSec < GOALS.pinnedShare * clean.startedPerSec) {
        failures.push(
          `pinned horizon: ${Math.round(r.startedPerSec)} jobs/s, ${percentOf(r, clean)} of clean (goal ≥ 90 %)`,
        );
      }
      if (r.p99 > GOALS.pinnedP99Ms) failures.push(`pinned horizon: p99 ${bound(r.p99)} ms (goal ≤ 1 s)`);
      await recover('idle in transaction');
    }

    // 2. four REPEATABLE READ sessions scanning Tusk's tables over and over
    if (runs('scanners')) {
      const scans = startScanners(url, o.schema);
      const w = await run(o.phaseMs);
      const r = await measure('4 REPEATABLE READ scanners', w);
      scanners = await scans.stop(w);
      if (r.startedPerSec < GOALS.scannersShare * clean.startedPerSec) {
        failures.push(
          `REPEATABLE READ scanners: ${Math.round(r.startedPerSec)} jobs/s, ${percentOf(r, clean)} of clean (goal ≥ 90 %)`,
        );
      }
      await recover('REPEATABLE READ scanners');
    }

    // 3. 1.5× overload, then back to the steady rate: the backlog must drain
    if (runs('overload')) {
      load.rate = Math.round(rate * 1.5);
      await measure('1.5× overload', await run(o.phaseMs));
      load.rate = rate;
      await recover('1.5× overload');
    }

    // 4. pg_terminate_backend against the workers' connections, 300 idle connections held
    if (runs('storm')) {
      const idle: pg.Client[] = [];
      for (let i = 0; i < 300; i++) {
        const c = new pg.Client({ connectionString: url, application_name: 'pressure-idle' });
        c.on('error', () => {});
        await c.connect();
        idle.push(c);
      }
      let storming = true;
      let terminated = 0;
      const storm = (async () => {
        while (storming) {
          const { rows } = await q(
            `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
             WHERE application_name LIKE 'pressure-w%' ORDER BY random() LIMIT 1`,
          ).catch(() => ({ rows: [] }));
          terminated += rows.length;
          await sleep(250);
        }
      })();
      const r = await measure(`terminate storm + 300 idle connections`, await run(o.phaseMs));
      storming = false;
      await storm;
      r.phase += ` (${terminated} terminated)`;
      await Promise.all(idle.map((c) => c.end().catch(() => {})));
      await recover('terminate storm');
    }

    await load.stop();
    const gaveUp = fleet.unexpectedExits();
    if (gaveUp.length > 0) failures.push(`${gaveUp.length} worker(s) exited on their own`);
    for (const w of gaveUp) {
      failures.push(
        `worker ${w.pid} exited (${w.exitCode ?? w.exitSignal}), its last lines:\n${w.log.slice(-120).join('\n')}`,
      );
    }
    return { ok: failures.length === 0, failures, capacity, rate, phases, scanners, server: serverLine };
  } finally {
    stopSampling();
    busy?.kill();
    if (o.timeline) writeTimeline(o.timeline, samples, seconds, produced);
    await fleet.stopAll(10_000).catch(() => {});
    await producer.close().catch(() => {});
    await dropSchema(observer, o.schema).catch(() => {});
    await observer.end().catch(() => {});
    await server.stop().catch(() => {});
  }
}

/**
 * Every sample as a JSON line, with the jobs started and enqueued in its second: what the
 * phases' figures sum up, to see when in a phase the queue fell behind and what it waited on.
 */
function writeTimeline(file: string, samples: Sample[], seconds: Map<number, Second>, produced: Map<number, number>) {
  const lines = samples.map((s) => {
    const key = Math.floor(s.at / 1000);
    return JSON.stringify({
      ...s,
      at: new Date(s.at).toISOString(),
      started: seconds.get(key)?.started ?? 0,
      produced: produced.get(key) ?? 0,
    });
  });
  writeFileSync(file, lines.length > 0 ? `${lines.join('\n')}\n` : '');
}

/** Another program taking a share of one CPU (chaos/busy.mjs), as on a shared host. */
function startBusy(percent: number): ChildProcess {
  const child = spawn(process.execPath, [new URL('./busy.mjs', import.meta.url).pathname, String(percent)], {
    stdio: 'ignore',
  });
  child.on('error', () => {});
  return child;
}

/** Enqueues at `rate` jobs/s, catching up when a statement was slow; one call in flight. */
class Producer {
  #rate: number;
  #owed = 0;
  readonly #tusk: Tusk;
  readonly #produced: Map<number, number>;
  #running = false;
  #loop: Promise<void> | null = null;

  constructor(tusk: Tusk, produced: Map<number, number>, rate: number) {
    this.#tusk = tusk;
    this.#produced = produced;
    this.#rate = rate;
  }

  get rate(): number {
    return this.#rate;
  }

  /** A new rate from now on: nothing owed at the old one is carried over. */
  set rate(rate: number) {
    this.#rate = rate;
    this.#owed = 0;
  }

  start(): void {
    this.#running = true;
    this.#loop = (async () => {
      let last = Date.now();
      let n = 0;
      while (this.#running) {
        const now = Date.now();
        // at most a second's worth owed: a slow spell is caught up, not piled up
        this.#owed = Math.min(this.#owed + ((now - last) * this.#rate) / 1000, Math.max(this.#rate, 1));
        last = now;
        const count = Math.min(Math.floor(this.#owed), 5000);
        if (count > 0) {
          this.#owed -= count;
          const t = Date.now();
          try {
            await this.#tusk.enqueueMany(
              Array.from({ length: count }, () => ({ task: 'work', tenant: `t${n++ % TENANTS}`, payload: { t } })),
            );
            const key = Math.floor(t / 1000);
            this.#produced.set(key, (this.#produced.get(key) ?? 0) + count);
          } catch {
            this.#owed += count; // an app would retry; so do we
          }
        }
        await sleep(20);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#loop;
  }
}

/**
 * Twice a second: dead tuples, backlog, what the workers' connections wait on, the machine's
 * CPU and the checkpointer's writes.
 */
function sample(
  q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>,
  schema: string,
  into: Sample[],
): () => void {
  let busy = false;
  let lastCpu = machineCpu();
  let lastCheckpoint: number | null = null;
  // pg_stat_checkpointer is PostgreSQL 17's; before it, the sample goes without
  let checkpointer: string | null = null;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      checkpointer ??= (await q(`SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL AS ok`)).rows[0]?.ok
        ? '(SELECT c.buffers_written FROM pg_stat_checkpointer c)'
        : 'NULL::bigint';
      const { rows } = await q(
        `SELECT
           ${checkpointer} AS checkpoint_buffers,
           coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'jobs'), 0)::bigint AS dead_jobs,
           coalesce(sum(n_dead_tup) FILTER (WHERE relname LIKE 'job_history%'), 0)::bigint AS dead_history,
           coalesce(sum(n_live_tup) FILTER (WHERE relname = 'jobs'), 0)::bigint AS backlog,
           (SELECT v.phase FROM pg_stat_progress_vacuum v
            WHERE v.relid = to_regclass(format('%I.jobs', $1::text))) AS vacuum
         FROM pg_stat_user_tables WHERE schemaname = $1`,
        [schema],
      );
      const waits = await q(
        // what the workers' connections wait on, and in which of Tusk's functions
        `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' ' ||
                coalesce(substring(query from '\\.([a-z_]+)\\('), left(query, 12)) AS w,
                (query LIKE '%claim_jobs(%') AS claim,
                extract(epoch FROM clock_timestamp() - query_start) * 1000 AS ms
         FROM pg_stat_activity WHERE application_name LIKE 'pressure-w%' AND state = 'active'`,
      );
      const r = rows[0] as {
        dead_jobs: string;
        dead_history: string;
        backlog: string;
        vacuum: string | null;
        checkpoint_buffers: string | null;
      };
      const active = waits.rows as Array<{ w: string; claim: boolean; ms: number }>;
      const claims = active.filter((a) => a.claim);
      const cpu = machineCpu();
      const checkpoint = r.checkpoint_buffers === null ? null : Number(r.checkpoint_buffers);
      into.push({
        at: Date.now(),
        deadJobs: Number(r.dead_jobs),
        deadHistory: Number(r.dead_history),
        backlog: Number(r.backlog),
        waits: active.map((a) => a.w),
        claims: claims.length,
        oldestClaimMs: Math.round(Math.max(0, ...claims.map((c) => Number(c.ms)))),
        vacuum: r.vacuum,
        cpu:
          cpu && lastCpu && cpu.total > lastCpu.total
            ? Math.round((100 * (cpu.busy - lastCpu.busy)) / (cpu.total - lastCpu.total)) / 100
            : null,
        checkpointBuffers: checkpoint !== null && lastCheckpoint !== null ? checkpoint - lastCheckpoint : null,
      });
      lastCpu = cpu;
      lastCheckpoint = checkpoint;
    } catch (error) {
      // a terminated observer connection: the next sample reconnects; anything else is a bug
      if (!isConnectionError(error)) throw error;
    } finally {
      busy = false;
    }
  }, 500);
  return () => clearInterval(timer);
}

function summarize(
  phase: string,
  w: Window,
  seconds: Map<number, Second>,
  produced: Map<number, number>,
  samples: Sample[],
  recoveredMs: number | null,
): PhaseResult {
  // whole seconds inside the window
  const from = Math.ceil(w.from / 1000);
  const to = Math.floor(w.to / 1000);
  const span = Math.max(1, to - from);
  let started = 0;
  let made = 0;
  const counts = new Array(BOUNDS.length).fill(0);
  for (let k = from; k < to; k++) {
    const s = seconds.get(k);
    if (s) {
      started += s.started;
      s.counts.forEach((c, i) => {
        counts[i] += c;
      });
    }
    made += produced.get(k) ?? 0;
  }
  const inWindow = samples.filter((s) => s.at >= w.from && s.at <= w.to);
  const waits = new Map<string, number>();
  const total = Math.max(
    1,
    inWindow.reduce((n, s) => n + s.waits.length, 0),
  );
  for (const s of inWindow) for (const x of s.waits) waits.set(x, (waits.get(x) ?? 0) + 1);
  const top = [...waits]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([x, n]) => `${x} ${Math.round((100 * n) / total)}%`)
    .join(', ');
  return {
    phase,
    seconds: (w.to - w.from) / 1000,
    producedPerSec: made / span,
    startedPerSec: started / span,
    p50: quantile(counts, 0.5),
    p99: quantile(counts, 0.99),
    deadJobsMax: Math.max(0, ...inWindow.map((s) => s.deadJobs)),
    deadHistoryMax: Math.max(0, ...inWindow.map((s) => s.deadHistory)),
    backlogMax: Math.max(0, ...inWindow.map((s) => s.backlog)),
    waits: top,
    recoveredMs,
    relations: [],
    statements: [],
  };
}

const percentOf = (r: PhaseResult, clean: PhaseResult) =>
  `${Math.round((100 * r.startedPerSec) / Math.max(1, clean.startedPerSec))} %`;

/** Rows, dead tuples and sizes of the schema's tables (history partitions folded). */
async function relationStates(
  q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>,
  schema: string,
): Promise<RelationState[]> {
  const { rows } = await q(
    `SELECT CASE WHEN s.relname LIKE 'job_history%' THEN 'job_history' ELSE s.relname END AS relation,
            sum(s.n_live_tup)::bigint AS live, sum(s.n_dead_tup)::bigint AS dead,
            round(sum(pg_relation_size(s.relid)) / 1048576.0, 1)::float8 AS heap_mb,
            round(sum(pg_indexes_size(s.relid)) / 1048576.0, 1)::float8 AS index_mb
     FROM pg_stat_user_tables s WHERE s.schemaname = $1
       AND (s.relname IN ('jobs', 'tenants', 'workers', 'active_pairs', 'lane_marks', 'pair_scans',
                          'tenant_serves', 'running_base', 'running_deltas')
            OR s.relname LIKE 'job_history%')
     GROUP BY 1 ORDER BY 1`,
    [schema],
  );
  return rows.map((r: Record<string, string | number>) => ({
    relation: String(r.relation),
    live: Number(r.live),
    dead: Number(r.dead),
    heapMb: Number(r.heap_mb),
    indexMb: Number(r.index_mb),
  }));
}

/**
 * pg_stat_statements read at each phase's end: `lap()` gives the statements that took most
 * of the server's time since the previous lap. Nested statements are counted too, so a
 * function's time shows both in its call and in the statements inside it.
 */
class StatementClock {
  #last = new Map<string, { calls: number; ms: number }>();
  readonly #q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>;

  constructor(q: (sql: string, values?: unknown[]) => Promise<pg.QueryResult>) {
    this.#q = q;
  }

  async lap(top = 8): Promise<StatementTime[]> {
    const { rows } = await this.#q(
      `SELECT queryid::text || ':' || toplevel AS key, toplevel,
              left(regexp_replace(query, '[[:space:]]+', ' ', 'g'), 90) AS query,
              calls::float8 AS calls, total_exec_time AS ms
       FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%'`,
    ).catch(() => ({ rows: [] }));
    const now = new Map<string, { calls: number; ms: number }>();
    const laps: StatementTime[] = [];
    for (const r of rows as Array<{ key: string; toplevel: boolean; query: string; calls: number; ms: number }>) {
      now.set(r.key, { calls: r.calls, ms: r.ms });
      const before = this.#last.get(r.key) ?? { calls: 0, ms: 0 };
      const calls = r.calls - before.calls;
      if (calls <= 0) continue;
      const totalMs = r.ms - before.ms;
      laps.push({ query: (r.toplevel ? '' : '(nested) ') + r.query, calls, totalMs, meanMs: totalMs / calls });
    }
    // an entry pg_stat_statements evicted and made again restarts from zero: kept as read
    this.#last = now;
    return laps.sort((a, b) => b.totalMs - a.totalMs).slice(0, top);
  }
}

/** The histogram bucket bound under which a fraction `p` of the starts fall. */
function quantile(counts: number[], p: number): number {
  const n = counts.reduce((a, b) => a + b, 0);
  if (n === 0) return 0;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i] ?? 0;
    if (seen >= p * n) return BOUNDS[i] ?? Number.POSITIVE_INFINITY;
  }
  return Number.POSITIVE_INFINITY;
}

/** The server settings and host load a run was given, as the report's header says them. */
function settingsGiven(o: PressureOptions): string {
  const set = Object.entries(o.serverSettings ?? {}).map(([k, v]) => `${k}=${v}`);
  return [
    set.length > 0 ? `; set for this run: ${set.join(', ')}` : '',
    o.busyPercent
      ? `; from the first stress on, another process keeps one CPU busy ${o.busyPercent} % of the time`
      : '',
  ].join('');
}

export function renderPressure(r: PressureReport, o: PressureOptions): string {
  return [
    `Pressure: ${o.workers} worker processes × ${o.concurrency} (defaults otherwise), no-op jobs over ${TENANTS} tenants; ` +
      `capacity ${Math.round(r.capacity)} jobs/s, steady producer at ${r.rate} jobs/s (70 %)`,
    `Server: ${r.server}${settingsGiven(o)}`,
    '',
    renderTable(
      [
        'phase',
        's',
        'enqueued/s',
        'started/s',
        'p50 ms',
        'p99 ms',
        'dead jobs',
        'dead history',
        'jobs rows',
        'recovered',
        'workers wait on (in)',
      ],
      r.phases.map((p) => [
        p.phase,
        Math.round(p.seconds),
        Math.round(p.producedPerSec),
        Math.round(p.startedPerSec),
        bound(p.p50),
        bound(p.p99),
        p.deadJobsMax,
        p.deadHistoryMax,
        p.backlogMax,
        p.phase.endsWith('recovery') ? (p.recoveredMs === null ? 'NO' : `${Math.round(p.recoveredMs / 1000)} s`) : '',
        p.waits,
      ]),
    ),
    '',
    'Latency: enqueue call to handler start, as histogram bounds. Dead tuples and rows: pg_stat_user_tables, max in the phase. ' +
      'Recovered: time until a 5 s window is back to the clean figures (rate ≥ 95 % of the producer, p99 ≤ 2× clean, rows ≤ 2× clean).',
    `Goals: pinned horizon ≥ ${GOALS.pinnedShare * 100} % of clean with p99 ≤ 1 s; REPEATABLE READ scanners ≥ ` +
      `${GOALS.scannersShare * 100} %; back to clean within 30 s after each stress; no worker exits.`,
    ...(r.scanners
      ? [
          `REPEATABLE READ scanners: ${r.scanners.sessions} sessions, ${r.scanners.scans} scans of ` +
            `${(r.scanners.meanScanMs / 1000).toFixed(1)} s on average (the jobs count and the history's last 10 minutes), ` +
            `busy ${r.scanners.busy.toFixed(1)} sessions on average, on a machine of ${cpus().length} CPUs.`,
        ]
      : []),
    '',
    'Relations the claim and completion touch, at the end of each phase (pg_stat_user_tables; sizes: pg_relation_size, pg_indexes_size):',
    renderTable(
      ['phase', 'relation', 'live rows', 'dead tuples', 'heap MB', 'indexes MB'],
      r.phases.flatMap((p) =>
        p.relations.map((x, i) => [i === 0 ? p.phase : '', x.relation, x.live, x.dead, x.heapMb, x.indexMb]),
      ),
    ),
    ...(o.statements
      ? [
          'Statements that took the server most time in each phase (pg_stat_statements; nested ones inside functions counted too):',
          renderTable(
            ['phase', 'statement', 'calls', 'total ms', 'mean ms'],
            r.phases.flatMap((p) =>
              p.statements.map((x, i) => [
                i === 0 ? p.phase : '',
                x.query,
                x.calls,
                Math.round(x.totalMs),
                x.meanMs.toFixed(2),
              ]),
            ),
          ),
        ]
      : []),
    r.ok ? 'goals hold' : `FAILED:\n  ${r.failures.join('\n  ')}`,
  ].join('\n');
}

/** A latency quantile as its histogram bound: "≤ 500", or "> 60000" past the last one. */
const bound = (ms: number) => (Number.isFinite(ms) ? `≤ ${ms}` : `> ${BOUNDS.at(-2)}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Four REPEATABLE READ sessions, each scanning Tusk's tables in a transaction of its own
 * over and over (then a second's sleep).
 */
function startScanners(url: string, schema: string) {
  let scanning = true;
  let scanMs = 0;
  let scanCount = 0;
  const sessions = Array.from({ length: 4 }, async () => {
    const c = new pg.Client({ connectionString: url, application_name: 'pressure-analytics' });
    await c.connect();
    try {
      while (scanning) {
        await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        const t = Date.now();
        await c.query(`SELECT tenant, state, count(*) FROM "${schema}".jobs GROUP BY 1, 2`);
        await c.query(
          `SELECT tenant, state, count(*), avg(wait_ms), max(run_ms) FROM "${schema}".job_history
           WHERE finished_at > now() - interval '10 minutes' GROUP BY 1, 2`,
        );
        if (scanning) {
          scanMs += Date.now() - t;
          scanCount++;
        }
        await c.query('SELECT pg_sleep(1)');
        await c.query('COMMIT');
      }
    } finally {
      await c.end();
    }
  });
  return {
    /** Ends the scans; what they did in the window `w`. */
    async stop(w: Window): Promise<ScannerLoad> {
      scanning = false;
      await Promise.all(sessions);
      return {
        sessions: sessions.length,
        scans: scanCount,
        meanScanMs: scanCount ? scanMs / scanCount : 0,
        busy: scanMs / (w.to - w.from),
      };
    },
  };
}
