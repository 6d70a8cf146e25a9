// The queue keeps moving with no Tusk worker: the lease path (fetch_jobs) gives back
// expired leases and promotes due jobs itself, and the rest of the upkeep runs in any
// long-lived Tusk process or `tusk upkeep`.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLI, cliEnv, exited, tusk } from './cli.js';
import { eventually, recorder, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

/** A consumer with nothing but SQL: fetch_jobs, as from psql or any driver. */
async function sqlFetch(queue: string, leaseMs = 30_000) {
  const { rows } = await db.pool.query<{ id: string; lease_token: string; attempts: number }>(
    `SELECT id::text, lease_token::text, attempts FROM "${db.schema}".fetch_jobs(1, $1, $2)`,
    [leaseMs, queue],
  );
  return rows[0] ?? null;
}

/** A producer with nothing but SQL: enqueue_job, as from psql, a trigger or any driver. */
async function sqlEnqueue(task: string, options: Record<string, unknown>): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(
    `SELECT "${db.schema}".enqueue_job($1, 'null', $2)::text AS id`,
    [task, JSON.stringify(options)],
  );
  return rows[0]?.id as string;
}

/**
 * Moves a job's run_at or lease_until to now: time driven, so that a "not yet" check
 * before it has a minute of margin on a busy machine rather than a few hundred ms.
 */
async function comeDue(column: 'run_at' | 'lease_until', id: string): Promise<void> {
  await db.pool.query(`UPDATE "${db.schema}".jobs SET ${column} = now() WHERE id = $1`, [id]);
}

/** Unfinished jobs in `queue`. */
async function waitingIn(queue: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::integer AS n FROM "${db.schema}".jobs WHERE queue = $1`,
    [queue],
  );
  return rows[0]?.n ?? 0;
}

describe('with SQL consumers alone, no Tusk process', () => {
  it('a delayed job is handed out once due, not before', async () => {
    const id = await sqlEnqueue('later', { queue: 'sql-delay', delayMs: 60_000 });
    expect(await sqlFetch('sql-delay')).toBeNull();
    await comeDue('run_at', id);
    await db.clockPast('SELECT run_at FROM $schema.jobs WHERE id = $1', [id]);
    expect((await sqlFetch('sql-delay'))?.id).toBe(id);
  });

  it('a job whose consumer died is handed out again once its lease ran out, and the old lease is refused', async () => {
    const id = await sqlEnqueue('dies', { queue: 'sql-lease' });
    const first = await sqlFetch('sql-lease', 60_000);
    expect(first?.id).toBe(id);
    expect(await sqlFetch('sql-lease')).toBeNull(); // still leased
    await comeDue('lease_until', id);
    await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [id]);
    const second = await sqlFetch('sql-lease');
    expect(second).toMatchObject({ id, attempts: 2 });
    expect(second?.lease_token).not.toBe(first?.lease_token);
    const ack = (token: string | undefined) =>
      db.pool.query<{ ok: boolean }>(`SELECT "${db.schema}".ack_job($1, $2, 'null') AS ok`, [id, token]);
    expect((await ack(first?.lease_token)).rows[0]?.ok).toBe(false);
    expect((await ack(second?.lease_token)).rows[0]?.ok).toBe(true);
    expect((await db.tusk.getJob(id))?.errors[0]?.message).toBe('lease expired before the job finished');
  });

  it("a lease run out in one queue frees its tenant's slot for a fetch from another queue", async () => {
    await db.tusk.tenants.set('sql-slot', { slots: 1 });
    const a = await sqlEnqueue('a', { queue: 'sql-slot-a', tenant: 'sql-slot' });
    const b = await sqlEnqueue('b', { queue: 'sql-slot-b', tenant: 'sql-slot' });
    const fetch = async (queue: string) =>
      (
        await db.pool.query<{ id: string }>(
          `SELECT id::text FROM "${db.schema}".fetch_jobs(1, 60000, $1, 'sql-slot')`,
          [queue],
        )
      ).rows[0]?.id ?? null;
    expect(await fetch('sql-slot-a')).toBe(a);
    expect(await fetch('sql-slot-b')).toBeNull(); // its one slot is taken
    await comeDue('lease_until', a);
    await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [a]);
    // before, only a fetch from sql-slot-a gave that lease back: a consumer of it that died
    // for good held the tenant's slot against every other queue
    expect(await fetch('sql-slot-b')).toBe(b);
    expect(await db.tusk.getJob(a)).toMatchObject({ state: 'available', attempts: 1 });
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE tenant = 'sql-slot'`);
    await db.tusk.tenants.set('sql-slot', { slots: null });
  });

  it('a job out of attempts whose lease ran out ends dead at the next fetch', async () => {
    const id = await sqlEnqueue('dies', { queue: 'sql-dead', maxAttempts: 1 });
    expect((await sqlFetch('sql-dead', 200))?.id).toBe(id);
    await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [id]);
    expect(await sqlFetch('sql-dead')).toBeNull();
    expect((await db.tusk.getJob(id))?.state).toBe('dead');
  });

  it('a job past its expiry is not handed out (tusk upkeep marks it expired, below)', async () => {
    const id = await sqlEnqueue('stale', { queue: 'sql-expiry', expiresAt: new Date(Date.now() + 200).toISOString() });
    await db.clockPast('SELECT expires_at FROM $schema.jobs WHERE id = $1', [id]);
    expect(await sqlFetch('sql-expiry')).toBeNull();
    expect((await db.tusk.getJob(id))?.state).toBe('available');
    await db.tusk.cancel(id); // out of the upkeep's counts below
  });
});

describe('the upkeep component', () => {
  it('runOnce: a lease run out goes back, a due job is promoted, an old job expires, a schedule fires', async () => {
    const upkeep = db.tusk.upkeep();
    const { id: leased } = await db.tusk.enqueue('x', null, { queue: 'u-lease' });
    await db.tusk.fetch({ queue: 'u-lease', leaseMs: 100 });
    const { id: delayed } = await db.tusk.enqueue('x', null, { queue: 'u-delay', delayMs: 100 });
    const { id: old } = await db.tusk.enqueue('x', null, { queue: 'u-old', expiresAt: new Date(Date.now() + 100) });
    await db.tusk.schedules.set('u-every-second', '* * * * * *', { task: 'tick', queue: 'u-ticks' });
    await db.clockPast('SELECT max(greatest(lease_until, run_at, expires_at)) FROM $schema.jobs WHERE id = ANY($1)', [
      [leased, delayed, old],
    ]);
    const report = await upkeep.runOnce();
    expect(report.queue).toMatchObject({ released: 1, promoted: 1, expired: 1, errors: [] });
    expect(report.schedules?.jobs).toBeGreaterThan(0);
    const states = await Promise.all([leased, delayed, old].map(async (id) => (await db.tusk.getJob(id))?.state));
    expect(states).toEqual(['available', 'available', 'expired']);
    expect(await waitingIn('u-ticks')).toBeGreaterThan(0);
    await db.tusk.schedules.remove('u-every-second');
    await upkeep.stop();
  });

  it('started, it announces each pass of each service: a test waits for the pass that did the work', async () => {
    const upkeep = db.tusk.upkeep({ everyMs: 50 });
    const passes: string[] = [];
    upkeep.on('pass', ({ service }) => passes.push(service));
    const released = new Promise<unknown>((resolve) =>
      upkeep.on('pass', ({ service, result }) => {
        if (service === 'queue' && (result as { released?: number } | null)?.released) resolve(result);
      }),
    );
    const { id } = await db.tusk.enqueue('x', null, { queue: 'u-events' });
    await db.tusk.fetch({ queue: 'u-events', leaseMs: 100 });
    upkeep.start();
    expect(await released).toMatchObject({ released: 1, errors: [] });
    expect((await db.tusk.getJob(id))?.state).toBe('available');
    await upkeep.stop();
    expect(new Set(passes)).toEqual(new Set(['queue', 'schedules', 'history']));
  });

  it('a pass cut off by a lost connection is logged at warn (it runs again), not as an error', async () => {
    // a terminated backend (a failover, pg_terminate_backend) is no fault of the upkeep's:
    // error-level lines were logged by every worker in a storm of terminations
    const rec = recorder();
    const name = `upkeep-cut-${process.pid}`;
    const other = db.another({
      logger: rec.log,
      connectionString: `${db.url}${db.url.includes('?') ? '&' : '?'}application_name=${name}`,
    });
    const upkeep = other.upkeep({ everyMs: 50 });
    const locker = await db.pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".workers IN ACCESS EXCLUSIVE MODE`);
      upkeep.start();
      const waiting = await eventually(async () => {
        const { rows } = await db.pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
          [name],
        );
        return rows[0]?.pid;
      }, 10_000);
      await db.pool.query('SELECT pg_terminate_backend($1)', [waiting]);
      const failed = await eventually(() => rec.lines.find((l) => l.msg.startsWith('upkeep (')), 10_000);
      expect(failed).toMatchObject({ level: 'warn', msg: expect.stringMatching(/failed; it runs again in a moment/) });
      await locker.query('ROLLBACK');
      // and it does: a later pass of the same service goes through
      const service = /upkeep \((\w+)\)/.exec(failed.msg)?.[1];
      await new Promise<void>((resolve) =>
        upkeep.on('pass', (p) => {
          if (p.service === service) resolve();
        }),
      );
      expect(rec.lines.filter((l) => l.level === 'error')).toEqual([]);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await upkeep.stop();
      await other.close();
    }
  });

  it('a step that fails is reported and the others still run', async () => {
    // a lock the expiry step cannot get within its statement timeout: only that step fails
    const { id: due } = await db.tusk.enqueue('x', null, { queue: 'u-fail', delayMs: 50 });
    const { id: old } = await db.tusk.enqueue('x', null, { queue: 'u-fail2', expiresAt: new Date(Date.now() + 50) });
    await db.clockPast('SELECT max(greatest(run_at, expires_at)) FROM $schema.jobs WHERE id = ANY($1)', [[due, old]]);
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM "${db.schema}".jobs WHERE id = $1 FOR UPDATE`, [old]);
      // this upkeep's sessions wait 200 ms at most for a lock
      const url = new URL(db.url);
      url.searchParams.set('options', '-c lock_timeout=200');
      const impatient = db.another({ connectionString: url.toString() });
      const upkeep = impatient.upkeep();
      try {
        const report = await upkeep.runOnce();
        expect(report.queue?.errors.map((e) => [e.step, e.code])).toEqual([['expire', '55P03']]);
        expect(report.queue).toMatchObject({ promoted: 1 });
        expect((await db.tusk.getJob(due))?.state).toBe('available');
      } finally {
        await upkeep.stop();
        await impatient.close();
      }
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
  });
});

describe('tusk upkeep', () => {
  it('--once does one pass and prints what it did', async () => {
    const { id } = await db.tusk.enqueue('x', null, { queue: 'cli-old', expiresAt: new Date(Date.now() + 50) });
    await db.clockPast('SELECT expires_at FROM $schema.jobs WHERE id = $1', [id]);
    const run = await tusk(cliEnv(db.url, db.schema), 'upkeep', '--once');
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report.queue.errors).toEqual([]);
    expect(report.queue.expired).toBeGreaterThanOrEqual(1);
    expect((await db.tusk.getJob(id))?.state).toBe('expired');
  });

  it('keeps a deployment of foreign consumers moving: a cron schedule fires, then it stops on SIGTERM', async () => {
    await db.tusk.schedules.set('cli-every-second', '* * * * * *', { task: 'tick', queue: 'cli-ticks' });
    const child = spawn(process.execPath, [CLI, 'upkeep', '--every-ms', '100'], {
      env: cliEnv(db.url, db.schema),
      stdio: 'pipe',
    });
    try {
      await eventually(async () => (await waitingIn('cli-ticks')) > 0, 10_000);
    } finally {
      child.kill('SIGTERM');
      expect(await exited(child)).toBe(0);
      await db.tusk.schedules.remove('cli-every-second');
    }
  });
});

describe('tusk serve alone, consumers over HTTP', () => {
  it('keeps delays, lease recovery and schedules: no worker anywhere', async () => {
    const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--no-dashboard'], {
      env: cliEnv(db.url, db.schema),
      stdio: 'pipe',
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout?.on('data', (d) => {
          out += d;
          const m = /serving on (http:\/\/\S+)/.exec(out);
          if (m?.[1]) resolve(m[1]);
        });
        child.once('exit', (code) => reject(new Error(`tusk serve exited (${code})`)));
      });
      const call = async (path: string, body: unknown) => {
        const r = await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        return (await r.json()) as { jobs: Array<{ id: string; token: string; attempt: number }> };
      };
      const { id: delayed } = await db.tusk.enqueue('later', null, { queue: 'serve-delay', delayMs: 60_000 });
      expect((await call('/api/fetch', { queue: 'serve-delay' })).jobs).toEqual([]);
      await comeDue('run_at', delayed);
      // handed out once due (an upkeep promoting it that very moment may hold it for a call)
      const fetched = async (queue: string) => (await call('/api/fetch', { queue })).jobs;
      const firstFetched = (queue: string) =>
        eventually(
          async () => {
            const jobs = await fetched(queue);
            return jobs.length > 0 ? jobs : null;
          },
          5000,
          50,
          `a job handed out from ${queue}`,
        );
      await db.clockPast('SELECT run_at FROM $schema.jobs WHERE id = $1', [delayed]);
      expect((await firstFetched('serve-delay')).map((j) => j.id)).toEqual([delayed]);

      const { id: dropped } = await db.tusk.enqueue('dies', null, { queue: 'serve-lease' });
      const first = (await call('/api/fetch', { queue: 'serve-lease', leaseMs: 60_000 })).jobs[0];
      expect(first?.id).toBe(dropped);
      expect(await fetched('serve-lease')).toEqual([]); // still leased
      await comeDue('lease_until', dropped);
      await db.clockPast('SELECT lease_until FROM $schema.jobs WHERE id = $1', [dropped]);
      expect((await firstFetched('serve-lease'))[0]).toMatchObject({ id: dropped, attempt: 2 });

      // an expired job: never handed out, and the server's upkeep ends it expired
      const { id: stale } = await db.tusk.enqueue('stale', null, {
        queue: 'serve-expiry',
        expiresAt: new Date(Date.now() + 200),
      });
      await db.clockPast('SELECT expires_at FROM $schema.jobs WHERE id = $1', [stale]);
      expect(await fetched('serve-expiry')).toEqual([]);
      await eventually(async () => (await db.tusk.getJob(stale))?.state === 'expired', 10_000);

      await db.tusk.schedules.set('serve-every-second', '* * * * * *', { task: 'tick', queue: 'serve-ticks' });
      await eventually(async () => (await waitingIn('serve-ticks')) > 0, 10_000);
      await db.tusk.schedules.remove('serve-every-second');
    } finally {
      child.kill('SIGTERM');
      await exited(child);
    }
  });
});
