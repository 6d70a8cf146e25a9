import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { channels } from '../src/db/schema.js';
import { useTestDb } from './helpers.js';

// Completions and progress announce their jobs' ids on NOTIFY channels, many ids to a
// notification; a payload holds under 8 000 bytes whatever the ids' length. Job ids grow
// for the life of an install: past 10 000 000 (8 digits), 900 of them no longer fitted,
// and every completion of a batch of 1 000 failed from then on (its jobs ran again when
// their leases ran out, and failed again).

const db = useTestDb(import.meta.url);
const s = `"${db.schema}"`;

describe('ids of 19 digits (the largest a job id can have)', () => {
  it('a batch of 1 000 progress updates and 1 000 completions goes through, and announces every id', async () => {
    await db.pool.query(`SELECT setval(pg_get_serial_sequence('${s}.jobs', 'id'), 9000000000000000000)`);
    await db.pool.query(`INSERT INTO ${s}.jobs (task, payload) SELECT 'work', 'null' FROM generate_series(1, 1000)`);
    const { rows: held } = await db.pool.query<{ id: string; lease_token: string }>(
      `SELECT id::text, lease_token::text FROM ${s}.claim_jobs(NULL, 1000, 3600000)`,
    );
    expect(held).toHaveLength(1000);
    expect(held.every((j) => j.id.length === 19)).toBe(true);

    const names = channels(db.schema);
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const heard: Record<string, Set<string>> = { [names.progress]: new Set(), [names.done]: new Set() };
    listener.on('notification', (n) => {
      for (const id of (n.payload ?? '').split(',')) heard[n.channel]?.add(id);
    });
    try {
      await listener.query(`LISTEN "${names.progress}"`);
      await listener.query(`LISTEN "${names.done}"`);
      const ids = held.map((j) => j.id);
      const { rows: progressed } = await db.pool.query<{ n: number }>(
        `SELECT ${s}.set_progress($1::bigint[], $2::bigint[], $3::jsonb[]) AS n`,
        [ids, held.map((j) => j.lease_token), held.map(() => JSON.stringify({ done: 1 }))],
      );
      expect(progressed[0]?.n).toBe(1000);
      const { rows: finished } = await db.pool.query<{ n: number }>(
        `SELECT count(*)::integer AS n FROM ${s}.finish_jobs('succeeded', $1::jsonb)`,
        [JSON.stringify(held.map((j) => ({ id: j.id, token: j.lease_token })))],
      );
      expect(finished[0]?.n).toBe(1000);
      // a round trip on the listening connection: the notifications sent before it are in
      await listener.query('SELECT 1');
      expect([...(heard[names.progress] ?? [])].sort()).toEqual([...ids].sort());
      expect([...(heard[names.done] ?? [])].sort()).toEqual([...ids].sort());
    } finally {
      await listener.end();
    }
  });
});
