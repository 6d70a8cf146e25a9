import { describe, expect, it } from 'vitest';
import { tenantsSql } from '../src/queries/tenants.js';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('statements on a new schema', () => {
  // a new schema's tables were never analyzed: the tenants list, estimated at a cost of 9
  // million for two rows, spent 4 s compiling with JIT for a query of 1 ms
  it('the tenants list is planned below the JIT threshold', async () => {
    const { rows } = await db.pool.query<{ 'QUERY PLAN': Array<{ Plan: { 'Total Cost': number } }> }>(
      `EXPLAIN (FORMAT JSON) ${tenantsSql(db.schema)}`,
      [null],
    );
    const cost = rows[0]?.['QUERY PLAN'][0]?.Plan['Total Cost'] ?? Number.NaN;
    const { rows: setting } = await db.pool.query<{ v: string }>(`SELECT current_setting('jit_above_cost') AS v`);
    expect(cost).toBeLessThan(Number(setting[0]?.v));
  });
});
