import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { JobContext, Worker } from '../src/index.js';
import { eventually, sleep, useTestDb } from './helpers.js';

/**
 * Property: with random tenants, slots, concurrency keys, rate limits, job durations,
 * failures and faults, and several workers claiming at once, no sample ever sees a tenant (or a key)
 * with more running jobs than its limit, and every job ends.
 * `npm test` runs a few cases; TUSK_PROPERTY_RUNS=20 runs the acceptance series.
 */
const RUNS = Number(process.env.TUSK_PROPERTY_RUNS ?? 3);
const db = useTestDb(import.meta.url);

const tenantArb = fc.record({
  slots: fc.option(fc.integer({ min: 1, max: 4 }), { nil: null, freq: 4 }),
  perKey: fc.option(fc.integer({ min: 1, max: 2 }), { nil: null, freq: 2 }),
  // rate-limited tenants take the locked path too; their starts per window are checked in rate.test.ts
  rate: fc.option(fc.record({ limit: fc.integer({ min: 10, max: 30 }), perMs: fc.constantFrom(100, 200) }), {
    nil: null,
    freq: 3,
  }),
});
const jobArb = (tenants: number) =>
  fc.record({
    tenant: fc.nat({ max: tenants - 1 }),
    key: fc.option(fc.constantFrom('k0', 'k1', 'k2'), { nil: null }),
    ms: fc.integer({ min: 0, max: 12 }),
    fail: fc.integer({ min: 0, max: 19 }).map((n) => n < 3), // 15 %: every choice comes from the seed
  });
const faultArb = fc.record({
  /** When in the run it hits: once this many thousandths of the jobs have ended (2 % to 60 %). */
  at: fc.integer({ min: 20, max: 600 }),
  kind: fc.constantFrom('terminate', 'lease', 'cancel', 'grow'),
  /** Which worker, job or tenant the fault hits: drawn here, so that a run replays from its seed. */
  pick: fc.nat({ max: 1_000_000 }),
});
const scenarioArb = fc.array(tenantArb, { minLength: 2, maxLength: 5 }).chain((tenants) =>
  fc.record({
    tenants: fc.constant(tenants),
    jobs: fc.array(jobArb(tenants.length), { minLength: 60, maxLength: 180 }),
    workers: fc.array(
      fc.record({
        concurrency: fc.integer({ min: 1, max: 6 }),
        prefetch: fc.oneof(fc.constant<'auto'>('auto'), fc.integer({ min: 0, max: 4 })),
      }),
      { minLength: 2, maxLength: 3 },
    ),
    faults: fc.array(faultArb, { maxLength: 6 }),
  }),
);

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

let run = 0;

async function check(s: Scenario): Promise<void> {
  run++;
  const queue = `prop${run}`;
  const names = s.tenants.map((_, i) => `r${run}t${i}`);
  for (const [i, t] of s.tenants.entries()) {
    await db.tusk.tenants.set(names[i] as string, { slots: t.slots, perKey: t.perKey, rate: t.rate });
  }
  const { ids } = await db.tusk.enqueueMany(
    s.jobs.map((j) => ({
      task: 'work',
      payload: { ms: j.ms, fail: j.fail },
      tenant: names[j.tenant] as string,
      queue,
      maxAttempts: 3,
      ...(j.key ? { concurrencyKey: j.key } : {}),
    })),
  );

  // samplers: consistent snapshots of running jobs against the limits in force
  const violations: string[] = [];
  let sampling = true;
  let samples = 0;
  /** Samples that saw a job running: proof the samplers overlapped the work, however fast it went. */
  let busy = 0;
  const sampler = async () => {
    while (sampling) {
      const rows = await db.rows<{
        tenant: string;
        slots: number | null;
        per_key: number | null;
        running: number;
        key_max: number | null;
      }>(
        `SELECT t.tenant, coalesce(t.slots, c.default_slots) AS slots, t.per_key,
                (SELECT count(*)::int FROM $schema.jobs j WHERE j.state = 'running' AND j.tenant = t.tenant) AS running,
                (SELECT max(n)::int FROM (SELECT count(*) AS n FROM $schema.jobs j
                   WHERE j.state = 'running' AND j.tenant = t.tenant AND j.concurrency_key <> ''
                   GROUP BY j.concurrency_key) k) AS key_max
         FROM $schema.tenants t CROSS JOIN $schema.config c WHERE t.tenant = ANY($1)`,
        [names],
      );
      samples++;
      if (rows.some((r) => r.running > 0)) busy++;
      for (const r of rows) {
        if (r.slots !== null && r.running > r.slots)
          violations.push(`${r.tenant}: ${r.running} running, ${r.slots} slots`);
        if (r.per_key !== null && (r.key_max ?? 0) > r.per_key)
          violations.push(`${r.tenant}: ${r.key_max} on one key, perKey ${r.per_key}`);
      }
    }
  };

  const handler = async (p: { ms: number; fail: boolean }, ctx: JobContext) => {
    // the job's run time, drawn from the seed: part of the scenario, not a wait
    await sleep(p.ms);
    if (p.fail && ctx.job.attempt === 1) throw new Error('random failure');
  };
  const instances = s.workers.map(() => db.another({ maxConnections: 4 }));
  const workers: Worker[] = s.workers.map((w, i) =>
    db.worker(
      {
        queues: [queue],
        concurrency: w.concurrency,
        prefetch: w.prefetch,
        maintenanceMs: 100,
        tasks: { work: { handler, retry: { backoff: 0 } } },
      },
      instances[i],
    ),
  );

  const endedSoFar = async () =>
    (await db.rows<{ n: number }>('SELECT count(*)::int AS n FROM $schema.job_history WHERE queue = $1', [queue]))[0]
      ?.n ?? 0;
  // each fault hits at its point of the run, however fast the run goes: never after its end
  const faults = async () => {
    for (const f of [...s.faults].sort((a, b) => a.at - b.at)) {
      const after = Math.floor((ids.length * f.at) / 1000);
      await eventually(async () => (await endedSoFar()) >= after, 30_000, 10, `${after} jobs ended`);
      if (f.kind === 'terminate') {
        // the worker's connection dies: its lock goes, its jobs are requeued, it reconnects
        const w = workers[f.pick % workers.length];
        await db.rows(
          `SELECT pg_terminate_backend(pid) FROM pg_locks
           WHERE locktype = 'advisory' AND objsubid = 2 AND classid = hashtext($1)::oid AND objid = $2::oid`,
          [db.schema, w?.id ?? -1],
        );
      } else if (f.kind === 'lease') {
        // an external consumer takes jobs and never comes back: the lease runs out
        await db.rows('SELECT id FROM $schema.claim_jobs(NULL, 3, 150, $1)', [[queue]]);
      } else if (f.kind === 'cancel') {
        await db.tusk.cancel(ids[f.pick % ids.length] as string);
      } else {
        const i = f.pick % names.length;
        const current = await db.tusk.tenants.get(names[i] as string);
        if (current?.slots) await db.tusk.tenants.set(names[i] as string, { slots: current.slots + 1 });
      }
    }
  };

  const samplers = [sampler(), sampler()];
  await Promise.all(workers.map((w) => w.start()));
  await faults();
  await eventually(
    async () => (await db.rows('SELECT 1 FROM $schema.jobs WHERE queue = $1', [queue])).length === 0,
    30_000,
    25,
  );
  sampling = false;
  await Promise.all(samplers);
  await Promise.all(instances.map((t) => t.close()));

  expect(violations).toEqual([]);
  expect(busy).toBeGreaterThan(0);
  const ended = await db.rows<{ state: string; n: number }>(
    'SELECT state::text, count(*)::int AS n FROM $schema.job_history WHERE queue = $1 GROUP BY 1',
    [queue],
  );
  expect(ended.reduce((n, r) => n + r.n, 0)).toBe(ids.length);
  expect(ended.every((r) => ['succeeded', 'dead', 'cancelled'].includes(r.state))).toBe(true);
  for (const name of names) expect((await db.tusk.tenants.get(name))?.running).toBe(0);
  const [lost] = await db.rows<{ n: number }>(
    `SELECT count(*)::int AS n FROM $schema.job_history
     WHERE queue = $1 AND errors @> '[{"name": "LostJobError"}]'`,
    [queue],
  );
  console.log(
    `run ${run}: ${ids.length} jobs, ${names.length} tenants, ${workers.length} workers, ` +
      `faults [${s.faults.map((f) => f.kind).join(' ')}], ${lost?.n ?? 0} jobs recovered after a lost worker or lease, ` +
      `${samples} samples (${busy} with jobs running), 0 violations`,
  );
}

describe('tenant slots under concurrency, crashes, retries, cancels and lease expiry', () => {
  it(
    `never exceeded, every job ends (${RUNS} random scenarios)`,
    async () => {
      await fc.assert(fc.asyncProperty(scenarioArb, check), { numRuns: RUNS, endOnFailure: true });
    },
    60_000 + RUNS * 30_000,
  );
});
