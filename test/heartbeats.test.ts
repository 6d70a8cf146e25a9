import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.js';
import { CLAIMED_COLUMNS, type ClaimedRow } from '../src/queries/claimJobs.js';
import { ActiveJob } from '../src/worker/activeJob.js';
import { Heartbeats } from '../src/worker/heartbeats.js';
import { HeldJobs } from '../src/worker/heldJobs.js';
import type { Registration } from '../src/worker/registration.js';
import { eventually, useTestDb } from './helpers.js';

// The heartbeats of one worker, on a pool whose heartbeat queries can be held: what a
// beat asked for while another is under way does.

const db = useTestDb(import.meta.url);
const pool = new pg.Pool({ connectionString: db.url, max: 2 });
afterAll(() => pool.end());

/**
 * The heartbeats of a worker registered as `id` on `on`, its listening connection up or
 * down, holding the jobs put in the returned `held`. `registered` counts the times a beat
 * registered the worker again (on a listening connection that is up).
 */
function heartbeatsOf(on: pg.Pool, id: number, connected: boolean, leaseMs: number) {
  const registered: number[] = [];
  const registration = {
    id,
    disconnectedAt: Number.NEGATIVE_INFINITY,
    register: async () => void registered.push(id),
  } as unknown as Registration;
  const held = new HeldJobs({ claimed: 0, succeeded: 0, retried: 0, dead: 0, cancelled: 0, lost: 0 }, () => {});
  const heartbeats = new Heartbeats(on, {
    schema: db.schema,
    log: createLogger(false),
    options: { heartbeatMs: 1000, leaseMs, leaseMarginMs: 5000 },
    held,
    registration,
    listener: { connected, client: connected ? ({} as pg.Client) : null },
    holding: () => true,
    beaten: () => {},
  });
  return { heartbeats, held, registered, registration: registration as unknown as { id: number } };
}

/**
 * `pool`, but the answer to its first heartbeat query waits for `release()`; `sent` holds
 * the worker ids of the heartbeats sent.
 */
function holdingFirstBeat() {
  const sent: number[] = [];
  let release!: () => void;
  const releaseFirst = new Promise<void>((resolve) => {
    release = resolve;
  });
  const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
  const watched = Object.create(pool) as pg.Pool;
  watched.query = (async (...args: unknown[]) => {
    const first = args[0] as string | { text?: string; values?: unknown[] };
    const text = typeof first === 'string' ? first : first?.text;
    if (text?.includes('heartbeat(')) {
      const values = (typeof first === 'string' ? args[1] : first.values) as unknown[];
      sent.push(Number(values[0]));
      if (sent.length === 1) await releaseFirst;
    }
    return query(...args);
  }) as typeof pool.query;
  return { watched, sent, release };
}

describe('heartbeats', () => {
  it('a beat asked for while one is under way is sent after it, under the id the worker has then', async () => {
    // After a reconnect that registered the worker under a new id, the beat asked for
    // then must go out even if one sent under the old id is still under way: it is the
    // one that moves the running jobs onto the new id.
    const { watched, sent, release } = holdingFirstBeat();
    const { heartbeats, registration } = heartbeatsOf(watched, 7, true, 30_000);
    const firstBeat = heartbeats.beat();
    await eventually(() => sent.length === 1);
    registration.id = 8; // registered again meanwhile
    const secondBeat = heartbeats.beat();
    release();
    await Promise.all([firstBeat, secondBeat]);
    await eventually(() => sent.length === 2);
    expect(sent).toEqual([7, 8]);
  });

  it('a beat answered after stop() registers nothing, and stop() ends after it', async () => {
    // A beat that finds the worker's row gone registers it again on its listening
    // connection (no workers row 4343 here). One under way at the stop did so after the
    // stop had returned, while the worker removed its row and closed that connection: a
    // row was left for a worker that no longer ran.
    const { watched, sent, release } = holdingFirstBeat();
    const { heartbeats, registered } = heartbeatsOf(watched, 4343, true, 30_000);
    const ended: string[] = [];
    const beat = heartbeats.beat().then(() => void ended.push('beat'));
    await eventually(() => sent.length === 1);
    const stopped = Promise.resolve(heartbeats.stop()).then(() => void ended.push('stop'));
    await new Promise((resolve) => setImmediate(resolve));
    release();
    await Promise.all([beat, stopped]);
    expect(registered).toEqual([]);
    expect(ended).toEqual(['beat', 'stop']);
    expect(sent).toEqual([4343]);
  });

  it('a beat that finds the worker reaped while its listening connection is down renews no lease', async () => {
    // The upkeep took the worker for dead (its row is gone): the jobs it holds will be
    // handed back, so their leases must not run on as if confirmed.
    await db.pool.query(`INSERT INTO "${db.schema}".jobs (task, queue) VALUES ('reaped', 'reaped')`);
    const { rows } = await db.pool.query<ClaimedRow>(
      `SELECT ${CLAIMED_COLUMNS} FROM "${db.schema}".claim_jobs(4242, 1, 60000, '{reaped}')`,
    );
    const [row] = rows;
    if (!row) throw new Error('no job claimed');
    const { heartbeats, held } = heartbeatsOf(pool, 4242, false, 60_000);
    const now = performance.now();
    const job = new ActiveJob(row, now, now, now + 1000);
    held.add(job);
    await heartbeats.beat();
    // no workers row 4242: the beat answered alive = false, with the lease still held
    expect(job.leaseUntil).toBe(now + 1000);
  });
});
