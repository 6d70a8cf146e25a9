// The chaos run: jobs over tenants with slots, worker processes, and faults while they
// work — SIGKILLed workers, terminated connections, a PostgreSQL restart, a worker frozen
// past its lease. Then the books are checked: nothing lost, one success per job, re-runs
// only for jobs in hand at a fault, slots never exceeded.
import pg from 'pg';
import { renderTable } from '../src/cli/table.js';
import { type EmbeddedServer, startEmbedded } from '../src/db/embedded.js';
import { dropSchema } from '../src/migrate/migrate.js';
import { Tusk } from '../src/tusk.js';
import { Fleet, slotName, type WorkerProcess } from './fleet.js';
import { acceptedAt, allRegistered, RECONNECT_WATCH_MS, type Return, returnChecks, watchReturns } from './reconnect.js';

export interface ChaosOptions {
  jobs: number;
  tenants: number;
  workers: number;
  /** Handlers per worker process. */
  concurrency: number;
  /** Each job sleeps a random time in this range (ms). */
  jobMs: [number, number];
  /** A random worker is SIGKILLed every ~this long (0.5× to 1.5×). */
  killEveryMs: number;
  leaseMs: number;
  /** How long the frozen worker stays frozen (past its lease). */
  stopMs: number;
  timeoutMs: number;
  /** The embedded PostgreSQL's folder: the run restarts that server, never a shared one. */
  dir: string;
  schema: string;
  progress?: (line: string) => void;
}

export type FaultType = 'kill' | 'terminate' | 'restart' | 'stop';

export interface Fault {
  type: FaultType;
  at: number;
  /** The worker process hit (all of them for a restart). */
  pid: number | null;
  detail: string;
}

export interface ChaosReport {
  ok: boolean;
  failures: string[];
  jobs: number;
  seconds: number;
  faults: Fault[];
  /** Rows of the printed table: check, value, expected, ok. */
  checks: Array<[string, string, string, boolean]>;
}

interface Execution {
  attempt: number;
  pid: number;
  at: number;
}

/** The short run (npm test runs it too). */
export const QUICK: ChaosOptions = {
  jobs: 2000,
  tenants: 10,
  workers: 3,
  concurrency: 4,
  jobMs: [30, 90],
  killEveryMs: 1000,
  leaseMs: 2000,
  stopMs: 4000,
  timeoutMs: 300_000,
  dir: '.tusk/chaos-pg',
  schema: 'chaos_quick',
};

/** Slots of tenant i: 2, 3, 4, 5, 2, 3, ... */
const slotsOf = (i: number) => 2 + (i % 4);

export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const say = o.progress ?? (() => {});
  const started = Date.now();
  const server = await startEmbedded({ dir: o.dir });
  const observer = new pg.Pool({
    connectionString: server.connectionString,
    max: 3,
    application_name: 'chaos-observer',
  });
  observer.on('error', () => {}); // the restart drops its idle connections
  const q = (sql: string, values?: unknown[]) => observer.query(sql.replaceAll('$schema', `"${o.schema}"`), values);
  const fleet = new Fleet({
    url: server.connectionString,
    schema: o.schema,
    concurrency: o.concurrency,
    leaseMs: o.leaseMs,
  });
  const faults: Fault[] = [];
  const slots = new Map(Array.from({ length: o.tenants }, (_, i) => [`t${i}`, slotsOf(i)]));
  const sampler = { samples: 0, violations: [] as string[], maxRunning: new Map<string, number>() };
  /** After the restart: when each worker was back at work (ms after the server accepted connections). */
  let returns: Promise<Return[]> | null = null;
  let watching = false;
  try {
    say('chaos · setting up');
    await dropSchema(observer, o.schema);
    await setUp(server, o, slots);

    for (let slot = 0; slot < o.workers; slot++) fleet.start(slot);
    const stopSampling = sample(q, slots, sampler);
    const remaining = async () => Number((await q('SELECT count(*) AS n FROM $schema.jobs')).rows[0]?.n);
    let left = o.jobs;
    let nextKill = Date.now() + o.killEveryMs * (0.5 + Math.random());
    let spared: WorkerProcess | null = null;
    let restartWait: number | null = null;
    const deadline = Date.now() + o.timeoutMs;
    while (left > 0) {
      if (Date.now() > deadline) throw new Error(`chaos: ${left} jobs still unfinished after ${o.timeoutMs} ms`);
      await sleep(100);
      left = await remaining().catch(() => left); // the server may be restarting
      const done = 1 - left / o.jobs;
      say(
        `chaos · ${(o.jobs - left).toLocaleString('en')} / ${o.jobs.toLocaleString('en')} done · ${faults.length} faults`,
      );
      // no kills while the restart waits for every worker to be registered
      const restartDue = done >= 0.5 && !faults.some((f) => f.type === 'restart');
      if (Date.now() >= nextKill && left > 0 && !restartDue) {
        // spared: the frozen worker until it has woken and reported, so its refused outcomes show
        const victim = pick([...fleet.live.values()].filter((w) => w !== spared));
        if (victim) {
          await fleet.kill(victim);
          faults.push({ type: 'kill', at: Date.now(), pid: victim.pid, detail: `SIGKILL ${slotName(victim.slot)}` });
          fleet.start(victim.slot);
        }
        nextKill = Date.now() + o.killEveryMs * (0.5 + Math.random());
      }
      if (done >= 0.25 && !faults.some((f) => f.type === 'terminate')) {
        // a worker with its connections up (a fresh one may still be connecting)
        const { rows } = await q(
          `SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity
           WHERE application_name LIKE 'chaos-w%' GROUP BY 1`,
        ).catch(() => ({ rows: [] as Array<{ name: string; n: number }> }));
        const connected = new Set(rows.map((r) => r.name));
        const victim = pick([...fleet.live.values()].filter((w) => w !== spared && connected.has(slotName(w.slot))));
        if (victim) {
          const at = Date.now();
          const { rowCount } = await q(
            'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
            [slotName(victim.slot)],
          );
          faults.push({
            type: 'terminate',
            at,
            pid: victim.pid,
            detail: `pg_terminate_backend × ${rowCount} (${slotName(victim.slot)})`,
          });
        }
      }
      // every worker registered first (or 10 s on): the check times their return, not a start-up
      restartWait ??= restartDue ? Date.now() : null;
      if (
        restartDue &&
        ((await allRegistered(q, [...fleet.live.values()])) || Date.now() > (restartWait ?? 0) + 10_000)
      ) {
        const at = Date.now();
        await server.restart('immediate');
        const returned = Date.now();
        const upAt = await acceptedAt(server, q, at).catch(() => returned);
        faults.push({
          type: 'restart',
          at,
          pid: null,
          detail: `pg_ctl restart -m immediate (${returned - at} ms; accepting connections after ${Math.round(upAt - at)} ms)`,
        });
        watching = true;
        returns = watchReturns(q, [...fleet.live.values()], upAt).finally(() => {
          watching = false;
        });
        // no kills for a while: the workers must be seen coming back by themselves
        nextKill = Date.now() + RECONNECT_WATCH_MS;
      }
      // not while the workers are being watched coming back: a frozen one would not be
      if (done >= 0.7 && !watching && !faults.some((f) => f.type === 'stop')) {
        const frozen = await busiest(q, fleet).catch(() => pick([...fleet.live.values()]));
        if (frozen) {
          spared = frozen;
          frozen.child.kill('SIGSTOP');
          faults.push({
            type: 'stop',
            at: Date.now(),
            pid: frozen.pid,
            detail: `SIGSTOP ${slotName(frozen.slot)} for ${o.stopMs} ms (lease ${o.leaseMs} ms)`,
          });
          setTimeout(() => frozen.child.kill('SIGCONT'), o.stopMs);
        }
      }
    }
    stopSampling();
    // let the frozen worker wake up and try to complete what it held, then stop everyone
    await sleep(Math.max(0, (faults.find((f) => f.type === 'stop')?.at ?? 0) + o.stopMs + 1500 - Date.now()));
    const exitCodes = await fleet.stopAll();
    say('chaos · checking');
    return await check(o, q, fleet, faults, sampler, exitCodes, started, returns);
  } finally {
    await fleet.stopAll(5000).catch(() => {});
    await dropSchema(observer, o.schema).catch(() => {});
    await observer.end().catch(() => {});
    await server.stop().catch(() => {});
  }
}

async function setUp(server: EmbeddedServer, o: ChaosOptions, slots: Map<string, number>): Promise<void> {
  const tusk = new Tusk({ connectionString: server.connectionString, schema: o.schema, logger: false });
  try {
    await tusk.migrate();
    const pool = await tusk.pool();
    await pool.query(
      `CREATE TABLE "${o.schema}".chaos_executions (
         job_id bigint NOT NULL, attempt integer NOT NULL, pid integer NOT NULL,
         at timestamptz NOT NULL DEFAULT clock_timestamp(), claimed_at timestamptz)`,
    );
    for (const [tenant, n] of slots) await tusk.tenants.set(tenant, { slots: n });
    const [min, max] = o.jobMs;
    for (let i = 0; i < o.jobs; i += 5000) {
      const size = Math.min(5000, o.jobs - i);
      await tusk.enqueueMany(
        Array.from({ length: size }, (_, k) => ({
          task: 'work',
          tenant: `t${(i + k) % o.tenants}`,
          payload: { ms: Math.round(min + Math.random() * (max - min)) },
          // kills count attempts; a job must not run out of them here
          maxAttempts: 1000,
        })),
      );
    }
  } finally {
    await tusk.close();
  }
}

type Query = (sql: string, values?: unknown[]) => Promise<pg.QueryResult>;

/** Every 50 ms: running jobs per tenant against its slots. Returns the stop function. */
function sample(
  q: Query,
  slots: Map<string, number>,
  into: { samples: number; violations: string[]; maxRunning: Map<string, number> },
): () => void {
  let busy = false;
  const timer = setInterval(async () => {
    if (busy) return;
    busy = true;
    try {
      const { rows } = await q(
        "SELECT tenant, count(*)::int AS n FROM $schema.jobs WHERE state = 'running' GROUP BY tenant",
      );
      into.samples++;
      for (const { tenant, n } of rows as Array<{ tenant: string; n: number }>) {
        into.maxRunning.set(tenant, Math.max(into.maxRunning.get(tenant) ?? 0, n));
        if (n > (slots.get(tenant) ?? 0)) into.violations.push(`${tenant}: ${n} running > ${slots.get(tenant)} slots`);
      }
    } catch {
      // the server is restarting
    } finally {
      busy = false;
    }
  }, 50);
  return () => clearInterval(timer);
}

async function check(
  o: ChaosOptions,
  q: Query,
  fleet: Fleet,
  faults: Fault[],
  sampler: { samples: number; violations: string[]; maxRunning: Map<string, number> },
  exitCodes: Array<number | null>,
  started: number,
  returns: Promise<Return[]> | null,
): Promise<ChaosReport> {
  const checks: ChaosReport['checks'] = [];
  const failures: string[] = [];
  const expect = (name: string, value: string | number, expected: string, ok: boolean) => {
    checks.push([name, String(value), expected, ok]);
    if (!ok) failures.push(`${name}: ${value} (expected ${expected})`);
  };

  const history = new Map<string, { state: string; attempts: number }>();
  for (const r of (await q('SELECT id::text, state::text, attempts FROM $schema.job_history')).rows) {
    history.set(r.id, { state: r.state, attempts: r.attempts });
  }
  const unfinished = Number((await q('SELECT count(*) AS n FROM $schema.jobs')).rows[0]?.n);
  const executions = new Map<string, Execution[]>();
  for (const r of (
    await q(
      'SELECT job_id::text AS id, attempt, pid, (extract(epoch FROM at) * 1000)::float8 AS at FROM $schema.chaos_executions ORDER BY at',
    )
  ).rows) {
    const list = executions.get(r.id) ?? [];
    list.push({ attempt: r.attempt, pid: r.pid, at: r.at });
    executions.set(r.id, list);
  }
  const succeeded = [...history.values()].filter((h) => h.state === 'succeeded').length;
  expect('jobs lost', o.jobs - history.size - unfinished, '0', o.jobs === history.size + unfinished);
  expect('jobs succeeded (one history row each)', succeeded, String(o.jobs), succeeded === o.jobs);
  const neverRan = [...history.keys()].filter((id) => !executions.has(id));
  expect('succeeded jobs whose handler never ran', neverRan.length, '0', neverRan.length === 0);

  // the completing attempt is the last one that ran: a stale worker never completed a re-leased job
  const staleWins = [...history].filter(([id, h]) => executions.get(id)?.at(-1)?.attempt !== h.attempts);
  expect('jobs completed by an attempt that was not the last', staleWins.length, '0', staleWins.length === 0);

  // a job ran more than once only if the process running it was hit by a fault meanwhile
  const rerunBy = new Map<FaultType, number>();
  const unexplained: string[] = [];
  const kills = faults.filter((f) => f.type === 'kill');
  const killToRerun: number[] = [];
  for (const [id, list] of executions) {
    for (let i = 0; i < list.length - 1; i++) {
      const e = list[i] as Execution;
      const next = list[i + 1] as Execution;
      const fault = faults.find(
        (f) => (f.pid === e.pid || f.type === 'restart') && f.at >= e.at - 100 && f.at <= next.at + 100,
      );
      if (!fault) unexplained.push(`job ${id}: attempt ${e.attempt} by pid ${e.pid}, again by pid ${next.pid}`);
      else rerunBy.set(fault.type, (rerunBy.get(fault.type) ?? 0) + 1);
      if (fault && kills.includes(fault)) killToRerun.push(next.at - fault.at);
    }
  }
  const reruns = [...rerunBy.values()].reduce((a, b) => a + b, 0);
  expect('executions > 1 not explained by a fault', unexplained.length, '0', unexplained.length === 0);
  failures.push(...unexplained.slice(0, 5));
  checks.push([
    'jobs run again after a fault',
    `${reruns} (${[...rerunBy].map(([t, n]) => `${t} ${n}`).join(', ') || 'none'})`,
    'only jobs in hand',
    true,
  ]);
  killToRerun.sort((a, b) => a - b);
  checks.push([
    'kill → re-run of its jobs, ms (p50 / max)',
    killToRerun.length
      ? `${Math.round(pct(killToRerun, 0.5))} / ${Math.round(killToRerun.at(-1) ?? 0)}`
      : 'no job in hand',
    '',
    true,
  ]);

  expect(
    `tenant over its slots (${sampler.samples} samples)`,
    sampler.violations.length,
    '0',
    sampler.violations.length === 0,
  );
  failures.push(...sampler.violations.slice(0, 5));
  checks.push([
    'most running per tenant seen (slots)',
    [...sampler.maxRunning]
      .sort()
      .map(([t, n]) => `${t} ${n}/${slotsOf(Number(t.slice(1)))}`)
      .join(' '),
    '',
    true,
  ]);
  const running = Number((await q("SELECT count(*) AS n FROM $schema.jobs WHERE state = 'running'")).rows[0]?.n);
  expect('running jobs left at the end', running, '0', running === 0);

  const restart = faults.find((f) => f.type === 'restart');
  if (restart && returns) {
    // every worker alive through the restart came back by itself, soon after the server
    // accepted connections: registered again, and claiming
    for (const [name, value, expected, ok] of returnChecks(await returns, restart.at))
      expect(name, value, expected, ok);
  }
  const stop = faults.find((f) => f.type === 'stop');
  if (stop) {
    const frozen = fleet.all.get(stop.pid as number);
    checks.push([
      'frozen worker: outcomes refused after its lease ran out',
      String(frozen?.droppedOutcomes ?? 0),
      'its re-leased jobs',
      true,
    ]);
  }
  const gaveUp = fleet.unexpectedExits();
  expect('workers that exited on their own', gaveUp.length, '0', gaveUp.length === 0);
  for (const w of gaveUp)
    failures.push(`worker ${w.pid} exited (${w.exitCode ?? w.exitSignal}):\n${w.log.slice(-25).join('\n')}`);
  // a run whose faults did not all happen proves nothing
  const kinds = new Set(faults.map((f) => f.type));
  expect(
    'faults injected (kills; terminate, restart, freeze)',
    `${kills.length}; ${['terminate', 'restart', 'stop'].filter((k) => kinds.has(k as Fault['type'])).length} of 3`,
    '> 3; 3 of 3',
    kills.length > 3 && kinds.has('terminate') && kinds.has('restart') && kinds.has('stop'),
  );
  expect(
    'graceful stop at the end (exit codes)',
    exitCodes.join(' '),
    'all 0',
    exitCodes.every((c) => c === 0),
  );
  return { ok: failures.length === 0, failures, jobs: o.jobs, seconds: (Date.now() - started) / 1000, faults, checks };
}

/** The report as text: the faults, then the checks. */
export function renderReport(r: ChaosReport, o: ChaosOptions): string {
  const counts = (t: FaultType) => r.faults.filter((f) => f.type === t).length;
  return [
    `Chaos: ${o.jobs.toLocaleString('en')} jobs over ${o.tenants} tenants (slots 2–5), ${o.workers} worker processes × ${o.concurrency}, ` +
      `jobs of ${o.jobMs[0]}–${o.jobMs[1]} ms, lease ${o.leaseMs} ms; ${r.seconds.toFixed(1)} s`,
    `Faults: ${counts('kill')} SIGKILL (every ~${o.killEveryMs} ms), ${counts('terminate')} pg_terminate_backend, ` +
      `${counts('restart')} PostgreSQL restart, ${counts('stop')} SIGSTOP past the lease`,
    ...r.faults.filter((f) => f.type !== 'kill').map((f) => `  ${f.type}: ${f.detail}`),
    '',
    renderTable(
      ['check', 'measured', 'expected', ''],
      r.checks.map(([name, value, expected, ok]) => [name, value, expected, ok ? 'ok' : 'FAIL']),
    ),
    '',
    r.ok ? 'all checks hold' : `FAILED:\n  ${r.failures.join('\n  ')}`,
  ].join('\n');
}

/** The live worker holding the most running jobs (a frozen one must have some in hand). */
async function busiest(q: Query, fleet: Fleet): Promise<WorkerProcess | undefined> {
  const { rows } = await q(
    `SELECT w.pid, count(*)::int AS n FROM $schema.jobs j JOIN $schema.workers w ON w.id = j.locked_by
     WHERE j.state = 'running' GROUP BY w.pid ORDER BY n DESC`,
  );
  const live = new Map([...fleet.live.values()].map((w) => [w.pid, w]));
  for (const { pid } of rows as Array<{ pid: number }>) {
    const w = live.get(pid);
    if (w) return w;
  }
  return pick([...live.values()]);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pick = <T>(list: T[]): T | undefined => list[Math.floor(Math.random() * list.length)];
const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
