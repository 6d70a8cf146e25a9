import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

// A claim takes at most a tenant's share of its batch in each round (what is left divided
// by the tenants chosen), and goes round again while a tenant took its whole share. These
// tests pin down what that promises: parallel claims take the next jobs in line of every
// lane (the first claim holds no more than it takes), and a batch is filled when some
// tenants have fewer jobs than their share.

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;

const fill = (queue: string, perTenant: Record<string, number>) =>
  db.pool.query(
    `INSERT INTO ${s}.jobs (task, payload, queue, tenant)
     SELECT 'work', 'null', $1, t.key FROM jsonb_each_text($2::jsonb) t, generate_series(1, t.value::int) g
     ORDER BY t.key, g`,
    [queue, JSON.stringify(perTenant)],
  );

const claim = async (queue: string, limit: number, on: pg.ClientBase | pg.Pool = db.pool) =>
  (
    await on.query<{ id: string; tenant: string }>(`SELECT id, tenant FROM ${s}.claim_jobs(NULL, $1, 60000, $2)`, [
      limit,
      [queue],
    ])
  ).rows;

/** Each tenant's jobs, in lane order, as their ids. */
const lanes = async (queue: string) => {
  const rows = await db.rows<{ tenant: string; ids: string[] }>(
    `SELECT tenant, array_agg(id::text ORDER BY priority, id) AS ids FROM $schema.jobs WHERE queue = $1 GROUP BY tenant`,
    [queue],
  );
  return new Map(rows.map((r) => [r.tenant, r.ids]));
};

const byTenant = (rows: Array<{ id: string; tenant: string }>) => {
  const out = new Map<string, string[]>();
  for (const r of rows) out.set(r.tenant, [...(out.get(r.tenant) ?? []), r.id]);
  for (const ids of out.values()) ids.sort((a, b) => Number(a) - Number(b));
  return out;
};

describe('a claim takes a share per tenant', () => {
  for (const limited of [false, true])
    it(`a claim beside another open one takes the next jobs of every lane (${limited ? 'tenants with slots' : 'no limits'}, 3 rounds)`, async () => {
      const queue = `parallel-${limited}`;
      const tenants = ['a', 'b', 'c', 'd'];
      if (limited) for (const t of tenants) await db.tusk.tenants.set(t, { slots: 10_000 });
      await fill(queue, Object.fromEntries(tenants.map((t) => [t, 1000])));
      // the tenants' rows exist (a claim adds a new tenant's row, and a parallel claim
      // would wait for that insert to commit)
      await db.pool.query(`INSERT INTO ${s}.tenants (tenant) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, [
        tenants,
      ]);
      const order = await lanes(queue);
      const first = new pg.Client({ connectionString: db.url });
      await first.connect();
      try {
        for (let round = 0; round < 3; round++) {
          await first.query('BEGIN');
          const held = byTenant(await claim(queue, 100, first)); // open: its row locks are held
          const next = limited ? null : byTenant(await claim(queue, 100));
          await first.query('COMMIT');
          for (const t of tenants) {
            const lane = order.get(t) ?? [];
            const at = round * (limited ? 25 : 50);
            expect(held.get(t)).toEqual(lane.slice(at, at + 25));
            // a limited tenant's claims wait for each other (its row lock): only unlimited
            // tenants' claims run side by side, and the second takes the jobs right after
            if (next) expect(next.get(t)).toEqual(lane.slice(at + 25, at + 50));
          }
        }
      } finally {
        await first.end();
      }
    });

  it('tenants with fewer jobs than their share: the others fill the batch, round-robin', async () => {
    const queue = 'uneven';
    await fill(queue, { few: 1, some: 10, many: 1000 });
    const got = await claim(queue, 100);
    expect(got).toHaveLength(100);
    const counts = Object.fromEntries([...byTenant(got)].map(([t, ids]) => [t, ids.length]));
    expect(counts).toEqual({ few: 1, some: 10, many: 89 });
    // round-robin by job: the first three are one of each tenant
    expect(new Set(got.slice(0, 3).map((r) => r.tenant))).toEqual(new Set(['few', 'some', 'many']));
    // and every lane in its order
    const order = await lanes(queue);
    for (const [t, ids] of byTenant(got)) expect(ids).toEqual((order.get(t) ?? []).slice(0, ids.length));
  });

  it("a tenant's jobs across several queues are taken in (priority, id) order, also past its first share", async () => {
    // the more urgent queue's jobs come later in id order; the other tenant has fewer
    // jobs than its share, so the first one's share grows in a second round
    await db.pool.query(
      `INSERT INTO ${s}.jobs (task, payload, queue, tenant, priority)
       SELECT 'work', 'null', q.queue, 'wide', q.priority
       FROM (VALUES ('wide-normal', 0), ('wide-urgent', -1)) q(queue, priority), generate_series(1, 100)
       ORDER BY q.priority DESC`,
    );
    await db.pool.query(
      `INSERT INTO ${s}.jobs (task, payload, queue, tenant) VALUES ('work', 'null', 'wide-normal', 'one')`,
    );
    const { rows } = await db.pool.query<{ id: string; tenant: string; priority: number }>(
      `SELECT id, tenant, priority FROM ${s}.claim_jobs(NULL, 20, 60000, $1)`,
      [['wide-normal', 'wide-urgent']],
    );
    const wide = rows.filter((r) => r.tenant === 'wide');
    expect(rows.filter((r) => r.tenant === 'one')).toHaveLength(1);
    expect(wide).toHaveLength(19);
    const urgent = await db.rows<{ id: string }>(
      `SELECT id::text FROM $schema.jobs WHERE queue = 'wide-urgent' ORDER BY id LIMIT 19`,
    );
    expect(wide.map((r) => r.id).sort((a, b) => Number(a) - Number(b))).toEqual(urgent.map((r) => r.id));
  });

  it('a tenant whose keys with work are all at their limit is not chosen: the claim goes to the others in one round', async () => {
    await db.tusk.tenants.set('stuck', { perKey: 1 });
    await db.pool.query(
      `INSERT INTO ${s}.jobs (task, payload, queue, tenant, concurrency_key)
       SELECT 'work', 'null', 'rounds', 'stuck', 'k' FROM generate_series(1, 5)`,
    );
    expect(
      (await db.pool.query(`SELECT id FROM ${s}.claim_jobs(NULL, 1, 60000, $1, 'stuck')`, [['rounds']])).rows,
    ).toHaveLength(1); // its key is at its limit now, its other jobs still available
    await fill('rounds', { busy: 1000 });
    const got = await claim('rounds', 1000);
    expect(got.filter((r) => r.tenant === 'busy')).toHaveLength(1000);
    // one serve a round: busy alone, its share the whole claim (chosen beside stuck, it
    // had half, and a second round took the rest)
    const serves = await db.rows<{ n: number }>(
      `SELECT count(*)::int AS n FROM $schema.tenant_serves WHERE tenant = 'busy'`,
    );
    expect(serves[0]?.n).toBe(1);
  });

  it('a tenant out of slots leaves its share to the others', async () => {
    const queue = 'slots';
    await db.tusk.tenants.set('small', { slots: 3 });
    await fill(queue, { small: 100, big: 100 });
    const got = await claim(queue, 50);
    const counts = Object.fromEntries([...byTenant(got)].map(([t, ids]) => [t, ids.length]));
    expect(counts).toEqual({ small: 3, big: 47 });
  });
});
