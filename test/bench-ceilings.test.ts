// The drain ceilings of `npm run bench -- peers`: they delete every job, keep each one's
// history when asked, and the bare one's statement reads its batch through the primary
// key, not the whole table (a ceiling slower than what it bounds is no ceiling).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { ceilingSql, drainCeiling } from '../bench/lib/ceilings.js';
import { databaseUrl } from './helpers.js';

const schema = `t_bench_ceilings_${randomBytes(3).toString('hex')}`;
const quiet = () => {};

describe('drain ceilings', () => {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
  afterAll(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pool.end();
  });

  it.each([false, true])('drains every job (keeping history: %s)', async (keepHistory) => {
    const d = await drainCeiling(databaseUrl(), 3_000, keepHistory, quiet, schema);
    expect({ done: d.done, remaining: d.remaining, history: d.history }).toEqual({
      done: 3_000,
      remaining: 0,
      history: keepHistory ? 3_000 : null,
    });
  });

  it('the bare statement takes its batch by the primary key, without a sequential scan', async () => {
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.query(`CREATE TABLE ${schema}.jobs (id bigserial PRIMARY KEY, payload jsonb NOT NULL)`);
    await pool.query(`INSERT INTO ${schema}.jobs (payload) SELECT '{}' FROM generate_series(1, 100000)`);
    await pool.query(`VACUUM ANALYZE ${schema}.jobs`);
    const sql = ceilingSql(`${schema}.jobs`, `${schema}.job_history`);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql.bare}`);
      await client.query('ROLLBACK');
      const plan = JSON.stringify(rows[0]?.['QUERY PLAN']);
      expect(plan).toContain('"Actual Rows":500');
      expect(plan).not.toContain('Seq Scan');
    } finally {
      client.release();
    }
  });
});
