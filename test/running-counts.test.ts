// The running counts the slots read (running_base + running_deltas) are written by a
// statement trigger on jobs: each UPDATE or DELETE adds, per tenant and per concurrency
// key, how many of its rows entered or left 'running'. These checks hold whatever statement
// moves the rows: the claim, a completion, a requeue, and plain SQL that moves rows in
// both directions at once or changes a running job's key.
import { describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

const TENANTS = ['rc-a', 'rc-b'];
const KEYS = ['', 'k1', 'k2'];

/** Every (tenant, key) whose count differs from the jobs' own, as "tenant/key: counted ≠ real". */
async function drift(): Promise<string[]> {
  const rows = await db.rows<{ tenant: string; ckey: string; counted: number; real: number }>(
    `SELECT t.tenant, k.ckey, $schema.running_now(t.tenant, k.ckey) AS counted,
            (SELECT count(*)::int FROM $schema.jobs j
             WHERE j.state = 'running' AND j.tenant = t.tenant
               AND (k.ckey = '' OR j.concurrency_key = k.ckey)) AS real
     FROM unnest($1::text[]) t(tenant) CROSS JOIN unnest($2::text[]) k(ckey)`,
    [TENANTS, KEYS],
  );
  return rows.filter((r) => r.counted !== r.real).map((r) => `${r.tenant}/${r.ckey}: ${r.counted} ≠ ${r.real}`);
}

const deltaRows = async () =>
  (await db.rows<{ n: number }>('SELECT count(*)::int AS n FROM $schema.running_deltas'))[0]?.n ?? 0;

describe('running counts', () => {
  it('follow every statement that moves jobs into or out of running, per tenant and per key', async () => {
    await db.tusk.enqueueMany(
      TENANTS.flatMap((tenant) =>
        KEYS.flatMap((key) =>
          Array.from({ length: 4 }, (_, n) => ({
            task: 'w',
            payload: n,
            tenant,
            queue: 'rc',
            ...(key ? { concurrencyKey: key } : {}),
          })),
        ),
      ),
    );
    const claimed = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM $schema.claim_jobs(NULL, 14, 600000, ARRAY['rc'])`,
    );
    expect(claimed).toHaveLength(14);
    expect(await drift()).toEqual([]);

    // one statement: some running jobs back to available, some available ones to running
    await db.rows(
      `UPDATE $schema.jobs
       SET state = CASE WHEN state = 'running' THEN 'available'::$schema.job_state ELSE 'running'::$schema.job_state END,
              lease_token = CASE WHEN state = 'running' THEN NULL ELSE nextval('$schema.lease_tokens') END,
              lease_until = CASE WHEN state = 'running' THEN NULL ELSE now() + interval '10 minutes' END
       WHERE queue = 'rc' AND id % 3 = 0`,
    );
    expect(await drift()).toEqual([]);

    // a lease renewed: running before and after, nothing to count
    const before = await deltaRows();
    await db.rows(
      `UPDATE $schema.jobs SET lease_until = now() + interval '20 minutes' WHERE queue = 'rc' AND state = 'running'`,
    );
    expect(await deltaRows()).toBe(before);

    // a running job moved to another tenant and another key
    await db.rows(
      `UPDATE $schema.jobs SET tenant = 'rc-b', concurrency_key = 'k2'
       WHERE id = (SELECT min(id) FROM $schema.jobs WHERE state = 'running' AND tenant = 'rc-a' AND concurrency_key = 'k1')`,
    );
    expect(await drift()).toEqual([]);

    // the fold moves the deltas into the base: the counts stay
    await db.rows('SELECT $schema.fold_running()');
    expect(await drift()).toEqual([]);

    // completions and requeues of running jobs, through the functions
    const running = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM $schema.jobs WHERE state = 'running' ORDER BY id`,
    );
    const half = Math.floor(running.length / 2);
    const outcomes = (rows: typeof running) => JSON.stringify(rows.map((r) => ({ id: r.id, token: r.lease_token })));
    await db.rows(`SELECT count(*) FROM $schema.finish_jobs('succeeded', $1::jsonb)`, [
      outcomes(running.slice(0, half)),
    ]);
    expect(await drift()).toEqual([]);
    await db.rows('SELECT count(*) FROM $schema.requeue_jobs($1::jsonb)', [outcomes(running.slice(half))]);
    expect(await drift()).toEqual([]);

    // a delete of running and waiting jobs together
    const more = await db.rows<{ id: string }>(`SELECT id::text FROM $schema.claim_jobs(NULL, 5, 600000, ARRAY['rc'])`);
    expect(more.length).toBeGreaterThan(0);
    await db.rows(`DELETE FROM $schema.jobs WHERE queue = 'rc' AND (id = ANY ($1::bigint[]) OR id % 2 = 0)`, [
      more.map((r) => r.id),
    ]);
    expect(await drift()).toEqual([]);
    await db.rows('SELECT $schema.fold_running()');
    expect(await drift()).toEqual([]);
  });
});
