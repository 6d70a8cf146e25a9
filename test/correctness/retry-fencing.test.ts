// A lease is never valid again once a later claim of its job was made — not
// after retry() (which reset the attempt number), nor after a claim that was rolled back.
import { describe, expect, it } from 'vitest';
import { LeaseLostError } from '../../src/index.js';
import { useTestDb } from '../helpers.js';
import { stateAfter } from './common.js';
import { rowToken, startUpkeep } from './hooks.js';

const db = useTestDb(import.meta.url);

async function leaseOne(queue: string, leaseMs = 30_000) {
  const [lease] = await db.tusk.fetch({ queue, leaseMs });
  if (!lease) throw new Error(`nothing to lease in ${queue}`);
  return lease;
}

describe('a lease from before retry()', () => {
  it('of a job whose lease ran out and that ended dead: its late ack is refused, the new lease acks', async () => {
    const { id } = await db.tusk.enqueue('late', null, { queue: 'r-dead', maxAttempts: 1 });
    const a = await leaseOne('r-dead', 200);
    const upkeep = await startUpkeep(db);
    const state = await stateAfter(db, id, ['running']).finally(() => upkeep.stop());
    expect(state).toBe('dead');
    expect(await db.tusk.retry(id)).toBe(true);
    const b = await leaseOne('r-dead');
    expect(b.id).toBe(id);

    await expect.soft(db.tusk.ack(a, 'from A')).rejects.toThrow(LeaseLostError);
    await expect.soft(db.tusk.ack(b, 'from B')).resolves.toBeUndefined();
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: 'from B' });
  });

  it('of a failed job waiting for its retry: its late ack, nack and extension are refused', async () => {
    const { id } = await db.tusk.enqueue('late', null, { queue: 'r-failed', maxAttempts: 3 });
    const a = await leaseOne('r-failed');
    expect(await db.tusk.nack(a, { delayMs: 600_000 })).toBe('failed');
    expect(await db.tusk.retry(id)).toBe(true);
    const b = await leaseOne('r-failed');
    expect(b.id).toBe(id);

    await expect.soft(db.tusk.extendLease(a, 60_000)).rejects.toThrow(LeaseLostError);
    await expect.soft(db.tusk.nack(a)).rejects.toThrow(LeaseLostError);
    await expect.soft(db.tusk.ack(a, 'from A')).rejects.toThrow(LeaseLostError);
    await expect.soft(db.tusk.ack(b, 'from B')).resolves.toBeUndefined();
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: 'from B' });
  });
});

describe('a claim that was rolled back', () => {
  it('gives a token that no later claim reuses: its ack is refused, the committed claim acks', async () => {
    const { id } = await db.tusk.enqueue('lost', null, { queue: 'r-rollback' });
    const client = await db.pool.connect();
    let lost: Record<string, unknown> | undefined;
    try {
      await client.query('BEGIN');
      // the documented SQL API, in a transaction that never commits (as a claim whose
      // commit was lost in a crash)
      const { rows } = await client.query(`SELECT * FROM "${db.schema}".fetch_jobs(1, 30000, 'r-rollback')`);
      lost = rows[0];
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(String(lost?.id)).toBe(id);
    const committed = await leaseOne('r-rollback');
    expect(committed.id).toBe(id);

    const { rows } = await db.pool.query(`SELECT "${db.schema}".ack_job($1, $2, '"from the lost claim"') AS ok`, [
      id,
      rowToken(lost as Record<string, unknown>),
    ]);
    expect.soft(rows[0]?.ok, 'ack_job with the rolled-back claim’s token').toBe(false);
    await expect.soft(db.tusk.ack(committed, 'from the committed claim')).resolves.toBeUndefined();
    expect(await db.tusk.getJob(id)).toMatchObject({ state: 'succeeded', result: 'from the committed claim' });
  });
});
