import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { otherClients } from '../src/db/embedded.js';
import type { Tusk } from '../src/index.js';
import { Gate } from './gate.js';
import { eventually, recorder, sleep, useTestDb } from './helpers.js';

// A worker whose connections all break at once (a server restart as its clients see it),
// through a gate in front of the test server: the server and the test's own connections
// carry on, so what is enqueued meanwhile is announced to nobody.
const db = useTestDb(import.meta.url);
let gate: Gate;
let cutOff: Tusk;
/** What the cut-off process logs: when its worker lost, or got back, its listening connection. */
const said = recorder();

beforeAll(async () => {
  gate = await Gate.open(db.url);
  cutOff = db.another({ connectionString: gate.url, logger: said.log });
});
afterAll(() => gate.close());

const state = async (id: string) => (await db.tusk.getJob(id))?.state;

/** Waits for the cut-off process to log `msg` (after the lines it had logged at `from`). */
const logged = (msg: string, from: number) =>
  eventually(() => said.lines.slice(from).some((l) => l.msg === msg), 20_000, 10, `the log line "${msg}"`);

/** Waits until a query of the cut-off process like `like` waits for a lock. */
const waitsForLock = (like: string) =>
  eventually(
    async () =>
      (
        await db.rows(
          `SELECT 1 FROM pg_stat_activity WHERE query LIKE $1 AND wait_event_type = 'Lock' AND client_port = ANY($2)`,
          [like, gate.ports()],
        )
      ).length > 0,
  );

/**
 * Holds back what the server sends, refuses new connections, and ends the worker's
 * listening connection (its end held back too); returns that connection.
 */
async function endListenerHeld(): Promise<{ pid: number; port: number } | undefined> {
  gate.hold();
  gate.refuse();
  const [listener] = await db.rows<{ pid: number; port: number }>(
    `SELECT pid, client_port AS port FROM pg_stat_activity
     WHERE query LIKE '%register_worker%' AND client_port = ANY($1)`,
    [gate.ports()],
  );
  await db.pool.query('SELECT pg_terminate_backend($1)', [listener?.pid]);
  return listener;
}

/** No claim through the gate running, nor run within the claim loops' look-agains (600 ms). */
const quietThroughGate = async () =>
  (
    await db.rows(
      `SELECT 1 FROM pg_stat_activity WHERE client_port = ANY($1) AND query LIKE '%claim_jobs%'
       AND (state <> 'idle' OR state_change > clock_timestamp() - interval '600 ms')`,
      [gate.ports()],
    )
  ).length === 0;

/** Cuts the gate until the worker has tried, and failed, to come back `attempts` times. */
async function outage(attempts: number): Promise<void> {
  const before = gate.refused;
  gate.cut();
  await eventually(() => gate.refused >= before + attempts, 20_000);
}

/**
 * A task `slow` that runs until `finish()`, returning 'done'; `started()` counts its runs.
 */
function heldTask() {
  let runs = 0;
  let finish!: () => void;
  const held = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const tasks = {
    slow: async () => {
      runs++;
      await held;
      return 'done';
    },
  };
  return { tasks, finish, started: () => runs };
}

describe('a worker cut off from the database', () => {
  it('claims a job enqueued meanwhile as soon as it is back, without waiting for its poll', async () => {
    // a poll this long is never what finds the job: only the reconnect can
    const worker = db.worker({ tasks: { work: () => 'done' }, pollMs: 600_000 }, cutOff);
    await worker.start();
    const first = await db.tusk.enqueue('work', {});
    await eventually(async () => (await state(first.id)) === 'succeeded');
    // no claim in flight when the connections go: one cut off as it ran still commits on
    // the server (it sees the client gone only when it writes the answer) and could take the
    // job enqueued next, leased to a worker that never saw it until the lease runs out
    await eventually(quietThroughGate);

    await outage(1);
    const during = await db.tusk.enqueue('work', {});
    await outage(3);
    gate.restore();
    // generous for a loaded machine; before, the claim loops slept through the reconnect
    await eventually(async () => (await state(during.id)) === 'succeeded', 20_000);
    expect((await db.tusk.getJob(during.id))?.attempts).toBe(1);
    await worker.stop();
  });

  it('does not start the jobs of a claim answered after its listening connection was lost: they may be handed back already', async () => {
    const runs: number[] = [];
    const worker = db.worker(
      { queues: ['late'], tasks: { late: (_p, ctx) => void runs.push(ctx.job.attempt) } },
      cutOff,
    );
    await worker.start();
    // the worker's claim waits for this lock (its tenants insert) while the test sets up
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE "${db.schema}".tenants IN EXCLUSIVE MODE`);
      const job = await db.tusk.enqueue('late', {}, { queue: 'late' });
      await waitsForLock('%claim_jobs%');
      // what the server says is held back; the worker cannot reconnect meanwhile
      const listener = await endListenerHeld();
      // the claim goes through for a worker whose session is gone: the upkeep of another
      // process hands the job back
      await blocker.query('COMMIT');
      await eventually(async () => (await state(job.id)) === 'running');
      await eventually(async () => {
        await db.tusk.upkeep().runOnce();
        return (await state(job.id)) === 'available';
      });
      // the worker learns of the loss first, then reads the claim's answer
      const before = said.lines.length;
      gate.release(listener?.port);
      await logged('worker lost its database connection; reconnecting', before);
      gate.release();
      gate.restore();
      await eventually(async () => (await state(job.id)) === 'succeeded', 20_000);
      // before, attempt 1 ran too: started from the late answer although handed back
      expect(runs).toEqual([2]);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      gate.release();
      gate.restore();
    }
    await worker.stop();
  });

  it('a claim sent after its listening connection was lost holds its job through the outage: it beats over its pool, runs the job once back', async () => {
    const runs: number[] = [];
    const job = await db.tusk.enqueue('due', {}, { queue: 'due', runAt: new Date(Date.now() + 1500) });
    const worker = db.worker(
      {
        queues: ['due'],
        pollMs: 600_000,
        // its own upkeep out of the way: only the test's hands the job back
        maintenanceMs: 600_000,
        tasks: { due: (_p, ctx) => void runs.push(ctx.job.attempt) },
      },
      cutOff,
    );
    await worker.start();
    // the promotion of the due job waits for this lock while the test sets up
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE "${db.schema}".jobs IN SHARE MODE`);
      await waitsForLock('%promote_due_jobs%');
      const listener = await endListenerHeld();
      await eventually(() => gate.closedWhileHeld(listener?.port as number));
      // the worker learns of the loss first, then reads the promotion's answer
      const before = said.lines.length;
      gate.release(listener?.port);
      await logged('worker lost its database connection; reconnecting', before);
      // due before the promotion's start, whatever the clocks: it is promoted
      await blocker.query(`UPDATE "${db.schema}".jobs SET run_at = now() - interval '1 minute' WHERE id = $1`, [
        job.id,
      ]);
      await blocker.query('COMMIT');
      gate.release();
      // the loop goes on from the promotion to a claim, under the id its lost session held
      await eventually(async () => (await state(job.id)) === 'running');
      const [claimed] = await db.rows<{ locked_by: number }>('SELECT locked_by FROM $schema.jobs WHERE id = $1', [
        job.id,
      ]);
      expect(claimed?.locked_by).toBe(worker.id);
      // its beats go on over its pool: no upkeep takes it for dead and hands the job back
      for (let pass = 0; pass < 3; pass++) {
        await sleep(400);
        await db.tusk.upkeep().runOnce();
      }
      expect(await state(job.id)).toBe('running');
      expect(runs).toEqual([]);
      // back, it registers again (its id was free) and starts the job it held
      gate.restore();
      await eventually(async () => (await state(job.id)) === 'succeeded', 20_000);
      await worker.stop();
      expect(runs).toEqual([1]);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      gate.release();
      gate.restore();
    }
  });

  it('registered again while an upkeep was reaping it as dead: it keeps its row, and the jobs it claims next', async () => {
    let done!: () => void;
    const held = new Promise<void>((resolve) => {
      done = resolve;
    });
    const runs: number[] = [];
    // its own upkeep and heartbeats out of the way: only the test's upkeep runs
    const worker = db.worker(
      {
        queues: ['reap'],
        leaseMs: 600_000,
        heartbeatMs: 290_000,
        maintenanceMs: 600_000,
        tasks: {
          hold: async (_p, ctx) => {
            runs.push(ctx.job.attempt);
            await held;
          },
        },
      },
      cutOff,
    );
    await worker.start();
    const blocker = await db.pool.connect();
    try {
      // its listening connection ends, and it cannot come back yet
      gate.refuse();
      const [listener] = await db.rows<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity WHERE query LIKE '%register_worker%' AND client_port = ANY($1)`,
        [gate.ports()],
      );
      await db.pool.query('SELECT pg_terminate_backend($1)', [listener?.pid]);
      // an upkeep finds it dead, then waits (for this lock) before acting on it
      await blocker.query('BEGIN');
      await blocker.query(`LOCK TABLE "${db.schema}".jobs IN EXCLUSIVE MODE`);
      const pass = db.tusk.upkeep().runOnce();
      await eventually(
        async () =>
          (
            await db.rows(`SELECT 1 FROM pg_stat_activity WHERE query LIKE $1 AND wait_event_type = 'Lock'`, [
              `%"${db.schema}".maintain(%`,
            ])
          ).length > 0,
      );
      // meanwhile it registers again (or waits to: it may not during a pass)
      gate.restore();
      await eventually(
        async () =>
          (
            await db.rows(
              `SELECT 1 FROM pg_stat_activity
               WHERE query LIKE '%register_worker%' AND pid <> $1 AND client_port = ANY($2)`,
              [listener?.pid, gate.ports()],
            )
          ).length > 0,
      );
      await blocker.query('COMMIT');
      await pass;
      // the next job it claims stays its own through the next upkeep
      const job = await db.tusk.enqueue('hold', {}, { queue: 'reap' });
      await eventually(() => runs.length === 1);
      await db.tusk.upkeep().runOnce();
      done();
      await eventually(async () => (await state(job.id)) === 'succeeded');
      // before, the upkeep took it for a dead worker's (no row) and it ran again: [1, 2]
      expect(runs).toEqual([1]);
      expect(await db.rows('SELECT id FROM $schema.workers WHERE id = $1', [worker.id])).toHaveLength(1);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      gate.restore();
      done();
    }
    await worker.stop();
  });

  it('claims again at once when the heartbeat after the break drops a job it held ahead', async () => {
    let done!: () => void;
    const held = new Promise<void>((resolve) => {
      done = resolve;
    });
    const runs: string[] = [];
    // one handler, one job held ahead; a poll this long never finds anything
    const worker = db.worker(
      {
        queues: ['ahead'],
        concurrency: 1,
        prefetch: 1,
        pollMs: 600_000,
        tasks: {
          long: async () => {
            runs.push('long');
            await held;
          },
          next: () => void runs.push('next'),
        },
      },
      cutOff,
    );
    const { ids } = await db.tusk.enqueueMany([
      { task: 'long', queue: 'ahead' },
      { task: 'next', queue: 'ahead' },
    ]);
    await worker.start();
    try {
      await eventually(async () => (await state(ids[1] as string)) === 'running' && runs.length === 1);
      gate.cut();
      // the job held ahead is handed back meanwhile (as a lost claim would be)
      await db.pool.query(
        `UPDATE "${db.schema}".jobs SET state = 'available', locked_by = NULL, lease_token = NULL, lease_until = NULL
         WHERE id = $1`,
        [ids[1]],
      );
      gate.restore();
      // the heartbeat after the reconnect drops it: the room it leaves is claimed at once,
      // not after the poll or the long job
      await eventually(async () => (await state(ids[1] as string)) === 'running', 20_000);
      expect(runs).toEqual(['long']);
    } finally {
      done();
    }
    await eventually(async () => (await state(ids[1] as string)) === 'succeeded');
    expect(runs).toEqual(['long', 'next']);
    await worker.stop();
  });

  it('finishes the job it was running through the break: the same attempt, its outcome written after', async () => {
    const { tasks, finish, started } = heldTask();
    const worker = db.worker(
      {
        tasks,
        leaseMs: 20_000,
        // its upkeep passes come often: back before its listening connection, one would find
        // the worker dead (its lock free) and hand its job back, unless it waits for it
        maintenanceMs: 20,
      },
      cutOff,
    );
    await worker.start();
    const job = await db.tusk.enqueue('slow', {});
    await eventually(() => started() === 1);
    await outage(2);
    const before = said.lines.length;
    gate.restore();
    // the job runs on until the worker is registered again: the upkeep passes of that
    // moment, which must not hand it back, all see it running
    await logged('worker reconnected to the database', before);
    finish();
    await eventually(async () => (await state(job.id)) === 'succeeded', 20_000);
    const done = await db.tusk.getJob(job.id);
    expect(done?.attempts).toBe(1);
    expect(done?.result).toBe('done');
    expect(started()).toBe(1);
    await worker.stop();
  });
});

describe('a worker whose listening connection alone is cut off', () => {
  /**
   * A pool whose connections go straight to the server, and whose settings, which the
   * worker's listening connection takes, go through the gate: the listening connection,
   * which holds the lock that shows the worker alive, can be cut off alone.
   */
  function poolPastTheGate(): { direct: pg.Pool; pool: pg.Pool } {
    const direct = new pg.Pool({ connectionString: db.url, max: 4 });
    const pool = new Proxy(direct, {
      get(target, key) {
        if (key === 'options') return { ...target.options, connectionString: gate.url };
        const value = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    return { direct, pool };
  }

  it('keeps its running job however long it cannot reconnect: it beats over its pool, and nobody else runs the job', async () => {
    // Without its lock, a worker that has not beaten for a second is taken for dead and
    // its jobs handed back.
    const { direct, pool } = poolPastTheGate();
    const tusk = db.another({ pool, logger: said.log });
    const { tasks, finish, started } = heldTask();
    const worker = db.worker({ tasks, leaseMs: 20_000 }, tusk);
    try {
      await worker.start();
      const job = await db.tusk.enqueue('slow', {});
      await eventually(() => started() === 1);
      await outage(2);
      // another process's upkeep (the worker's own waits for its lock), for three times
      // the second after which a worker without its lock is taken for dead
      for (let pass = 0; pass < 30; pass++) {
        await db.pool.query(`SELECT "${db.schema}".maintain()`);
        await sleep(100);
      }
      expect(await state(job.id)).toBe('running');
      const before = said.lines.length;
      gate.restore();
      await logged('worker reconnected to the database', before);
      finish();
      await eventually(async () => (await state(job.id)) === 'succeeded', 20_000);
      expect((await db.tusk.getJob(job.id))?.attempts).toBe(1);
      expect(started()).toBe(1);
    } finally {
      finish();
      gate.restore();
      await worker.stop();
      await tusk.close();
      await direct.end();
    }
  });

  it('keeps its running job while it stops with its listening connection cut: it beats over its pool until the job ends', async () => {
    const { direct, pool } = poolPastTheGate();
    const tusk = db.another({ pool, logger: said.log });
    const { tasks, finish, started } = heldTask();
    const worker = db.worker({ tasks, leaseMs: 20_000, shutdownTimeoutMs: 60_000 }, tusk);
    let stopped: Promise<void> | undefined;
    try {
      await worker.start();
      const job = await db.tusk.enqueue('slow', {});
      await eventually(() => started() === 1);
      stopped = worker.stop();
      await outage(2);
      // before, a stopping worker did not beat: taken for dead a second later, its job
      // handed back while the handler ran on
      for (let pass = 0; pass < 30; pass++) {
        await db.pool.query(`SELECT "${db.schema}".maintain()`);
        await sleep(100);
      }
      expect(await state(job.id)).toBe('running');
      finish();
      await eventually(async () => (await state(job.id)) === 'succeeded', 20_000);
      expect((await db.tusk.getJob(job.id))?.attempts).toBe(1);
    } finally {
      finish();
      gate.restore();
      await (stopped ?? worker.stop());
      await tusk.close();
      await direct.end();
    }
  });

  it('starts no job it holds ahead until it is back, though its beats over the pool go on', async () => {
    // Those beats keep the worker alive only while they go on: if they stop too, the
    // upkeep hands its jobs back a second later, and a job held ahead started meanwhile
    // would run twice.
    const { direct, pool } = poolPastTheGate();
    const tusk = db.another({ pool, logger: said.log });
    const started: number[] = [];
    let finish!: () => void;
    const held = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const worker = db.worker(
      {
        queues: ['ahead'],
        concurrency: 1,
        prefetch: 1,
        tasks: {
          step: async (p: { n: number }) => {
            started.push(p.n);
            if (p.n === 0) await held;
          },
        },
      },
      tusk,
    );
    try {
      await worker.start();
      const first = await db.tusk.enqueue('step', { n: 0 }, { queue: 'ahead' });
      await eventually(() => started.length === 1);
      const second = await db.tusk.enqueue('step', { n: 1 }, { queue: 'ahead' });
      // held ahead: claimed, not started
      await eventually(async () => (await state(second.id)) === 'running');
      await outage(2);
      await sleep(500); // beats over the pool have confirmed the leases since the loss
      finish();
      await eventually(async () => (await state(first.id)) === 'succeeded', 20_000);
      await sleep(500);
      expect(started).toEqual([0]);
      const before = said.lines.length;
      gate.restore();
      await logged('worker reconnected to the database', before);
      await eventually(async () => (await state(second.id)) === 'succeeded', 20_000);
      expect(started).toEqual([0, 1]);
    } finally {
      finish();
      gate.restore();
      await worker.stop();
      await tusk.close();
      await direct.end();
    }
  });
});

describe('a connection terminated as it starts', () => {
  /**
   * A new connection, made by `start`, with the FATAL in the same read as its last startup
   * message: pool.connect() hands the client out, and takes its own error listener off,
   * before the caller's code runs (a client's connect() resolves the same way). Resolves
   * with what `start` resolves.
   */
  async function terminatedAsItStarts<T>(start: () => Promise<T>): Promise<T> {
    const before = new Set(gate.ports());
    gate.holdNewFromReady();
    const handed = start();
    // the new connection's backend, started up: its ReadyForQuery is held in the gate
    const { pid, port } = (await eventually(async () => {
      const ports = gate.ports().filter((p) => !before.has(p));
      const rows = await db.rows<{ pid: number; port: number }>(
        "SELECT pid, client_port AS port FROM pg_stat_activity WHERE client_port = ANY ($1) AND state = 'idle'",
        [ports],
      );
      return rows[0] ?? null;
    })) as { pid: number; port: number };
    await db.rows('SELECT pg_terminate_backend($1)', [pid]);
    await eventually(() => gate.closedWhileHeld(port));
    gate.release(); // ReadyForQuery and the FATAL in one read
    return handed;
  }

  it('made by pool.connect() with the FATAL in the same read as its startup: the caller gets the error, the process goes on', async () => {
    const tusk = db.another({ connectionString: gate.url });
    const pool = await tusk.pool();
    // the pool's onConnect (READ COMMITTED) is the connection's first query: it fails, and
    // the pool ends the connection and rejects the caller's connect() with the error
    await expect(terminatedAsItStarts(() => pool.connect())).rejects.toThrow(/terminat/);
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await tusk.close();
  });

  it("handed out by an app's pool.connect() with the FATAL in the same read as its startup: the caller gets the error, the process goes on", async () => {
    // an app's pool has no onConnect of Tusk's: the client is handed out before the
    // caller's code runs, with the pool's own error listener already taken off
    const appPool = new pg.Pool({ connectionString: gate.url, max: 2 });
    const tusk = db.another({ pool: appPool });
    const pool = await tusk.pool();
    const client = await terminatedAsItStarts(() => pool.connect());
    await expect(client.query('SELECT 1')).rejects.toThrow(/not queryable|terminat/);
    client.release(true);
    expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await tusk.close();
    await appPool.end();
  });

  it("the embedded server's look for other sessions before it stops: it answers 0, the process goes on", async () => {
    // an 'error' event nobody hears is thrown from the socket's read: recorded here, not
    // only in the run's report
    const uncaught: unknown[] = [];
    const record = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', record);
    try {
      expect(await terminatedAsItStarts(() => otherClients(gate.url))).toBe(0);
    } finally {
      process.off('uncaughtException', record);
    }
    expect(uncaught).toEqual([]);
  });

  it("the same on the app's own pool, while a Tusk uses it; its listeners go with close()", async () => {
    const pool = new pg.Pool({ connectionString: gate.url, max: 2 });
    const tusk = db.another({ pool });
    await tusk.pool();
    const client = await terminatedAsItStarts(() => pool.connect());
    await expect(client.query('SELECT 1')).rejects.toThrow(/not queryable|terminat/);
    client.release(true);
    await tusk.close();
    expect([pool.listenerCount('error'), pool.listenerCount('connect')]).toEqual([0, 0]);
    await pool.end();
  });
});
