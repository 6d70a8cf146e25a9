import { describe, expect, it, vi } from 'vitest';
import { parseCrontab, TuskValidationError } from '../src/index.js';
import { fireDueSchedules } from '../src/schedules/fire.js';
import { eventually, sleep, useSessions, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const session = useSessions(() => db.url);

/** Jobs enqueued by a schedule, with their tick (run_at), unfinished and finished. */
async function tickJobs(schedule: string): Promise<Array<{ id: string; tick: Date; state: string }>> {
  return db.rows(
    `SELECT j.id, j.run_at AS tick, j.state::text AS state
     FROM $schema.schedule_runs r
     JOIN (SELECT id, run_at, state FROM $schema.jobs UNION ALL SELECT id, run_at, state FROM $schema.job_history) j
       ON j.id = r.job_id
     WHERE r.schedule = $1 ORDER BY j.run_at`,
    [schedule],
  );
}

/** Moves `name`'s next tick 3 s back: the upkeep is 3 s late, three ticks are owed. */
async function owe3s(name: string) {
  await db.pool.query(
    `UPDATE "${db.schema}".schedules SET next_run_at = date_trunc('second', now()) - interval '3 seconds'
     WHERE name = $1`,
    [name],
  );
}

/**
 * Fires `name`'s ticks of the last 3 s, as an upkeep that comes 3 s late (due, available),
 * and those of the next `aheadMs` (scheduled); the upkeep's result.
 */
async function fireLate(name: string, aheadMs = 1000) {
  await owe3s(name);
  return fireDueSchedules(await db.tusk.pool(), db.schema, aheadMs);
}

describe('recurring jobs', () => {
  it('3 workers over 5 ticks: exactly 5 jobs, one per tick, each started at its tick', async () => {
    const runs: Array<{ at: number; worker: number }> = [];
    const instances = [0, 1, 2].map(() => db.another({ maxConnections: 4 }));
    const workers = instances.map((t, i) =>
      db.worker(
        {
          queues: ['cron'],
          maintenanceMs: 100,
          tasks: { report: () => void runs.push({ at: Date.now(), worker: i }) },
        },
        t,
      ),
    );
    await Promise.all(workers.map((w) => w.start()));
    // five per-second ticks inside one minute, 2 s from now (once the workers have started,
    // however long that took), or from the next minute's first second when they would not
    // fit in this one (3 to 7 s from now)
    let start = new Date(Math.ceil(Date.now() / 1000) * 1000 + 2000);
    if (start.getUTCSeconds() > 55) start = new Date(Math.ceil(start.getTime() / 60_000) * 60_000);
    const s = start.getUTCSeconds();
    const cron = `${s}-${s + 4} ${start.getUTCMinutes()} ${start.getUTCHours()} ${start.getUTCDate()} ${start.getUTCMonth() + 1} *`;
    const info = await db.tusk.schedule('five-ticks', cron, { task: 'report', queue: 'cron', tz: 'UTC' });
    expect(info.nextRunAt).toEqual(start);
    await eventually(() => runs.length >= 5 && Date.now() > start.getTime() + 5500, 20_000, 50);
    await Promise.all(workers.map((w) => w.stop()));

    const jobs = await tickJobs('five-ticks');
    expect(jobs.map((j) => j.tick.getTime())).toEqual([0, 1, 2, 3, 4].map((i) => start.getTime() + i * 1000));
    expect(jobs.every((j) => j.state === 'succeeded')).toBe(true);
    expect(runs).toHaveLength(5);
    // each job ran at its tick, not before (a tick is enqueued ahead as a scheduled job)
    runs.sort((a, b) => a.at - b.at);
    for (const [i, run] of runs.entries()) {
      expect(run.at).toBeGreaterThanOrEqual(start.getTime() + i * 1000);
    }
    const schedule = await db.tusk.schedules.get('five-ticks');
    expect(schedule?.lastRunAt).toEqual(new Date(start.getTime() + 4000));
    expect(schedule?.nextRunAt?.getTime()).toBeGreaterThan(Date.now() + 300 * 24 * 3600_000); // next year
    console.log(
      `five ticks, 3 workers: jobs ran ${runs.map((r) => r.at - start.getTime()).join(', ')} ms after ${start.toISOString()}, by workers ${runs.map((r) => r.worker).join(',')}`,
    );
  });

  it('set, get, list, remove; re-setting keeps the next tick; removing cancels ticks enqueued ahead', async () => {
    const a = await db.tusk.schedule('nightly-report', '0 3 * * *', {
      task: 'report',
      payload: { kind: 'daily' },
      tenant: 'acme',
      tz: 'Europe/Paris',
    });
    expect(a).toMatchObject({
      name: 'nightly-report',
      task: 'report',
      tenant: 'acme',
      tz: 'Europe/Paris',
      source: 'api',
    });
    const paris = new Intl.DateTimeFormat('en', { timeZone: 'Europe/Paris', hour: 'numeric', hourCycle: 'h23' });
    expect(Number(paris.format(a.nextRunAt as Date))).toBe(3); // 3 o'clock in Paris
    const again = await db.tusk.schedule('nightly-report', '0 3 * * *', {
      task: 'report',
      payload: { kind: 'v2' },
      tenant: 'acme',
      tz: 'Europe/Paris',
    });
    expect(again.nextRunAt).toEqual(a.nextRunAt);
    expect(again.payload).toEqual({ kind: 'v2' });
    expect((await db.tusk.schedules.list()).map((s) => s.name)).toContain('nightly-report');

    // a per-second schedule fired ahead, then removed: its scheduled ticks are cancelled
    await db.tusk.schedule('every-second', '* * * * * *', { queue: 'nowhere' });
    const fired = await fireDueSchedules(await db.tusk.pool(), db.schema, 3000);
    expect(fired?.jobs).toBeGreaterThanOrEqual(2);
    const ahead = (await tickJobs('every-second')).filter((j) => j.state === 'scheduled');
    expect(ahead.length).toBeGreaterThanOrEqual(1);
    expect(await db.tusk.schedules.remove('every-second')).toBe(true);
    expect(await db.tusk.schedules.remove('every-second')).toBe(false);
    for (const j of ahead) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    expect(await db.tusk.schedules.get('every-second')).toBeNull();
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'nowhere'`);
  });

  it('missed ticks after downtime: skipped by default, the latest N with backfill: N', async () => {
    for (const [name, backfill] of [
      ['skipper', 0],
      ['filler', 3],
    ] as const) {
      await db.tusk.schedule(name, '*/5 * * * *', { queue: 'missed', backfill });
      // Tusk was down for an hour: the next tick not enqueued is an hour old
      await db.pool.query(
        `UPDATE "${db.schema}".schedules SET next_run_at = date_trunc('hour', now()) - interval '1 hour' WHERE name = $1`,
        [name],
      );
    }
    const every = 5 * 60_000;
    // the expectations below are computed from the database's clock read just before the
    // ticks are: away from the instants where they change (a tick's time, and a minute
    // after it), by more than the moment between the two
    const edge = (t: number) =>
      [0, 60_000].some((at) => {
        const d = (((t - at) % every) + every) % every;
        return Math.min(d, every - d) < 2_000;
      });
    const dbNow = async () =>
      (await db.rows<{ ms: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms'))[0]
        ?.ms as number;
    if (edge(await dbNow())) await sleep(4_000);
    const now = await dbNow();
    await fireDueSchedules(await db.tusk.pool(), db.schema, 1000);
    // ticks less than a minute late are not missed: enqueued (there is one if a tick
    // passed in the last minute)
    const late = Math.ceil((now - 60_000) / every) * every;
    const onTime = late <= now ? [late] : [];
    const missed = Math.floor((now - 60_000) / every) * every; // the latest missed tick
    const ticks = async (name: string) => (await tickJobs(name)).map((j) => j.tick.getTime());
    expect(await ticks('skipper')).toEqual(onTime);
    expect(await ticks('filler')).toEqual([missed - 2 * every, missed - every, missed, ...onTime]);
    for (const name of ['skipper', 'filler']) {
      expect((await db.tusk.schedules.get(name))?.nextRunAt?.getTime()).toBeGreaterThan(Date.now());
    }
    // nothing more on the next pass
    await fireDueSchedules(await db.tusk.pool(), db.schema, 1000);
    expect(await tickJobs('filler')).toHaveLength(3 + onTime.length);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'missed'`);
  });

  it('paused: no tick is enqueued and those enqueued and not started are cancelled; resumed at its next tick from now', async () => {
    const upkeep = db.tusk.upkeep();
    await db.tusk.schedules.set('pausable', '* * * * * *', { task: 'tick', queue: 'pausable' });
    await upkeep.runOnce(); // ticks up to a second ahead
    // ahead (scheduled: nothing promotes them here), and one already due when the pass
    // enqueued it if the set and the pass straddled a second (available): none started
    const enqueued = await tickJobs('pausable');
    expect(enqueued.filter((j) => j.state === 'scheduled').length).toBeGreaterThan(0);
    const paused = await db.tusk.schedules.pause('pausable');
    expect(paused?.pausedAt).toBeInstanceOf(Date);
    // cancelled, and forgotten as ticks: resumed within the same second, it enqueues them again
    expect(await Promise.all(enqueued.map(async (j) => (await db.tusk.getJob(j.id))?.state))).toEqual(
      enqueued.map(() => 'cancelled'),
    );
    expect(await tickJobs('pausable')).toEqual([]);
    // passes while paused enqueue nothing, even with its next tick long due
    await db.pool.query(
      `UPDATE "${db.schema}".schedules SET next_run_at = now() - interval '10 seconds' WHERE name = 'pausable'`,
    );
    await upkeep.runOnce();
    expect(await tickJobs('pausable')).toEqual([]);
    expect(await db.tusk.schedules.pause('pausable')).toMatchObject({ pausedAt: paused?.pausedAt }); // already
    const before = Date.now();
    const resumed = await db.tusk.schedules.resume('pausable');
    expect(resumed?.pausedAt).toBeNull();
    // the ticks of the pause are skipped: the next is from now on
    expect(resumed?.nextRunAt?.getTime()).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    await upkeep.runOnce();
    const after = await tickJobs('pausable');
    expect(after.length).toBeGreaterThan(0);
    expect(after.every((j) => j.state === 'scheduled' || j.state === 'available')).toBe(true);
    expect(after.every((j) => j.tick.getTime() >= Math.floor(before / 1000) * 1000)).toBe(true);
    expect(await db.tusk.schedules.pause('nothing-of-that-name')).toBeNull();
    expect(await db.tusk.schedules.resume('nothing-of-that-name')).toBeNull();
    await db.tusk.schedules.remove('pausable');
    await upkeep.stop();
  });

  it('edited: its ticks enqueued and not started are redone under the new definition; with a new expression only those whose time came', async () => {
    /** The unfinished jobs of the schedule's ticks, by tick. */
    const pending = async () =>
      db.rows<{ id: string; tick: Date; state: string; payload: unknown }>(
        `SELECT j.id, r.tick, j.state::text AS state, j.payload FROM $schema.schedule_runs r
         JOIN $schema.jobs j ON j.id = r.job_id WHERE r.schedule = 'edited' ORDER BY r.tick`,
      );
    const set = (cron: string, v: number) => db.tusk.schedules.set('edited', cron, { queue: 'edits', payload: { v } });
    await set('* * * * * *', 1);
    // ticks of the last 3 s (due, available) and of the next 3 s (ahead, scheduled)
    await fireLate('edited', 3000);
    const [started] = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM $schema.fetch_jobs(1, 60000, 'edits')`,
    );
    const old = (await pending()).filter((j) => j.id !== started?.id);
    expect(old.length).toBeGreaterThanOrEqual(4);
    expect(old.every((j) => (j.payload as { v: number }).v === 1)).toBe(true);

    // a new payload, the same expression: the same ticks, each a new job with the new payload
    await set('* * * * * *', 2);
    for (const j of old) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    const redone = (await pending()).filter((j) => j.id !== started?.id);
    expect(redone.map((j) => j.tick)).toEqual(old.map((j) => j.tick));
    expect(redone.every((j) => (j.payload as { v: number }).v === 2 && j.state !== 'running')).toBe(true);
    // the job that had started goes on
    expect((await db.tusk.getJob(started?.id as string))?.state).toBe('running');
    // set again unchanged (as at every start-up): its jobs stay as they are
    await set('* * * * * *', 2);
    expect((await pending()).filter((j) => j.id !== started?.id).map((j) => j.id)).toEqual(redone.map((j) => j.id));

    // a new expression: the old one's ticks cancelled; those whose time had come enqueued
    // again under the new definition, the later ones not (the new expression's next tick on)
    const clock = async () => {
      const [row] = await db.rows<{ ms: number }>('SELECT (extract(epoch FROM now()) * 1000)::float8 AS ms');
      return row?.ms as number;
    };
    const before = await clock();
    const edited = await set('0 0 1 1 *', 3);
    const after = await clock();
    for (const j of redone) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    const kept = (await pending()).filter((j) => j.id !== started?.id);
    const keptTicks = kept.map((j) => j.tick.getTime());
    const dueBefore = redone.map((j) => j.tick.getTime()).filter((t) => t <= before);
    expect(dueBefore.length).toBeGreaterThan(0);
    expect(keptTicks.filter((t) => t <= before)).toEqual(dueBefore);
    expect(keptTicks.filter((t) => t > after)).toEqual([]);
    expect(redone.some((j) => j.tick.getTime() > after)).toBe(true);
    expect(kept.every((j) => (j.payload as { v: number }).v === 3)).toBe(true);
    expect(edited.nextRunAt?.getUTCMonth()).toBe(0);
    await db.rows(`SELECT $schema.ack_job($1, $2)`, [started?.id, started?.lease_token]);
    await db.tusk.schedules.remove('edited');
  });

  it('paused or removed: no tick of it starts afterwards, those already due but not started included', async () => {
    for (const stop of ['pause', 'remove'] as const) {
      const name = `due-${stop}`;
      await db.tusk.schedules.set(name, '* * * * * *', { queue: 'due-stop' });
      await fireLate(name);
      const enqueued = await tickJobs(name);
      expect(enqueued.filter((j) => j.state === 'available').length).toBeGreaterThanOrEqual(3);
      await db.tusk.schedules[stop](name);
      for (const j of enqueued) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    }
    await db.tusk.schedules.remove('due-pause');
  });

  it('a tick job that ran, failed and was retried is not a tick to cancel: a pause leaves it', async () => {
    await db.tusk.schedules.set('ran', '* * * * * *', { queue: 'ran', maxAttempts: 1 });
    await fireLate('ran');
    const [lease] = await db.rows<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM $schema.fetch_jobs(1, 60000, 'ran')`,
    );
    if (!lease) throw new Error('no tick job fetched');
    await db.rows(`SELECT $schema.nack_job($1, $2, 0, '{"message":"boom"}')`, [lease.id, lease.lease_token]);
    expect((await db.tusk.getJob(lease.id))?.state).toBe('dead');
    await db.rows('SELECT $schema.retry_jobs(ARRAY[$1::bigint])', [lease.id]);
    const others = (await tickJobs('ran')).filter((j) => j.id !== lease.id);
    expect(others.length).toBeGreaterThan(0);
    await db.tusk.schedules.pause('ran');
    expect((await db.tusk.getJob(lease.id))?.state).toBe('available');
    for (const j of others) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    await db.tusk.schedules.remove('ran');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'ran'`);
  });

  it('a new expression keeps the ticks whose time came: enqueued again under the new definition', async () => {
    await db.tusk.schedules.set('reworded', '* * * * * *', { queue: 'reworded', payload: { v: 1 } });
    await fireLate('reworded');
    const before = await tickJobs('reworded');
    const [now] = await db.rows<{ at: Date }>('SELECT now() AS at');
    const due = before.filter((j) => j.tick <= (now?.at as Date)).map((j) => j.tick.getTime());
    expect(due.length).toBeGreaterThanOrEqual(3);
    // the same ticks, written another way
    await db.tusk.schedules.set('reworded', '*/1 * * * * *', { queue: 'reworded', payload: { v: 2 } });
    for (const j of before) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
    const again = await db.rows<{ tick: Date; payload: unknown; state: string }>(
      `SELECT j.run_at AS tick, j.payload, j.state::text AS state FROM $schema.schedule_runs r
       JOIN $schema.jobs j ON j.id = r.job_id WHERE r.schedule = 'reworded' ORDER BY j.run_at`,
    );
    expect(again.map((j) => j.tick.getTime()).filter((t) => due.includes(t))).toEqual(due);
    for (const j of again) expect(j.payload).toEqual({ v: 2 });
    await db.tusk.schedules.remove('reworded');
  });

  it('a tick job waiting more than a day is still found: a removal cancels it', async () => {
    await db.tusk.schedules.set('hourly', '0 * * * *', { queue: 'unserved' });
    const [row] = await db.rows<{ next: Date }>(
      `SELECT next_run_at AS next FROM $schema.schedules WHERE name = 'hourly'`,
    );
    // the upkeep fired 26 hourly ticks into a queue nobody serves
    const fired = await db.rows<{ n: number }>(
      `SELECT $schema.fire_schedule('hourly', $1,
         ARRAY(SELECT generate_series(date_trunc('hour', now()) - interval '26 hours',
                                      date_trunc('hour', now()) - interval '1 hour', interval '1 hour')),
         $1) AS n`,
      [row?.next],
    );
    expect(fired[0]?.n).toBe(26);
    const waiting = await db.rows<{ id: string }>(`SELECT id FROM $schema.jobs WHERE queue = 'unserved'`);
    expect(waiting.length).toBe(26);
    await db.tusk.schedules.remove('hourly');
    for (const j of waiting) expect((await db.tusk.getJob(j.id))?.state).toBe('cancelled');
  });

  it('a tick job claimed and handed back while a pause waits for its row is not cancelled: the pause reads its newest version', async () => {
    await db.tusk.schedules.set('raced', '* * * * * *', { queue: 'raced' });
    await fireLate('raced');
    // a consumer fetches a tick job, runs it and nacks it, in a transaction still open
    const consumer = await session();
    await consumer.query('BEGIN');
    const {
      rows: [lease],
    } = await consumer.query<{ id: string; lease_token: string }>(
      `SELECT id, lease_token FROM "${db.schema}".fetch_jobs(1, 60000, 'raced')`,
    );
    if (!lease) throw new Error('no tick job fetched');
    await consumer.query(`SELECT "${db.schema}".nack_job($1, $2, 0)`, [lease.id, lease.lease_token]);
    const pauser = await session();
    const [pid] = (await pauser.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows.map((r) => r.pid);
    const paused = pauser.query(`SELECT "${db.schema}".pause_schedule('raced', true, NULL)`);
    await eventually(
      async () => (await db.rows('SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted', [pid])).length,
    );
    await consumer.query('COMMIT');
    await paused;
    // it ran once: a retry of a run, not a tick that never started
    expect((await db.tusk.getJob(lease.id))?.state).toBe('available');
    await db.tusk.schedules.remove('raced');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'raced'`);
  });

  it('a new schedule made by two sessions at once: the later is an edit of the other, whose ticks it redoes', async () => {
    // holds the insert of a schedule by a session that asks, for a second: another makes
    // the schedule and fires it meanwhile
    await db.pool.query(
      `CREATE FUNCTION "${db.schema}".test_hold_insert() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF current_setting('tusk_test.hold', true) = 'on' THEN PERFORM pg_sleep(1); END IF;
         RETURN NEW;
       END $$;
       CREATE TRIGGER test_hold BEFORE INSERT ON "${db.schema}".schedules
       FOR EACH ROW EXECUTE FUNCTION "${db.schema}".test_hold_insert()`,
    );
    try {
      const held = db.another({
        connectionString: `${db.url}${db.url.includes('?') ? '&' : '?'}options=-c%20tusk_test.hold%3Don`,
      });
      const late = held.schedules.set('twice', '* * * * * *', { queue: 'twice', payload: { v: 2 } });
      await eventually(
        async () =>
          (await db.rows(`SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%put_schedule%'`))
            .length,
      );
      await db.tusk.schedules.set('twice', '* * * * * *', { queue: 'twice', payload: { v: 1 } });
      expect((await fireLate('twice'))?.jobs).toBeGreaterThan(0);
      await late;
      const payloads = await db.rows<{ payload: unknown }>(
        `SELECT j.payload FROM $schema.schedule_runs r JOIN $schema.jobs j ON j.id = r.job_id
         WHERE r.schedule = 'twice'`,
      );
      expect(payloads.length).toBeGreaterThan(0);
      for (const p of payloads) expect(p.payload).toEqual({ v: 2 });
    } finally {
      await db.pool.query(`DROP TRIGGER test_hold ON "${db.schema}".schedules`);
      await db.tusk.schedules.remove('twice');
    }
  });

  it('a new expression does not step over ticks whose time came and that the upkeep has not fired yet', async () => {
    await db.tusk.schedules.set('owed', '* * * * * *', { queue: 'owed' });
    // the upkeep is 3 s behind: three ticks are owed, none enqueued
    await owe3s('owed');
    const [owed] = await db.rows<{ next: Date }>(
      `SELECT next_run_at AS next FROM $schema.schedules WHERE name = 'owed'`,
    );
    // the same instants in another time zone's name: a new expression, twice before the upkeep
    await db.tusk.schedules.set('owed', '* * * * * *', { queue: 'owed', tz: 'Etc/UTC' });
    await db.tusk.schedules.set('owed', '* * * * * *', { queue: 'owed', tz: 'UTC' });
    await fireDueSchedules(await db.tusk.pool(), db.schema, 0);
    const ticks = (await tickJobs('owed')).map((j) => j.tick.getTime());
    const first = owed ? owed.next.getTime() : Number.NaN;
    expect(ticks.slice(0, 3)).toEqual([first, first + 1000, first + 2000]);
    await db.tusk.schedules.remove('owed');
  });

  it('a tick is forgotten a day after its time once its job and those before it have finished', async () => {
    await db.tusk.schedules.set('aged', '0 * * * *', { queue: 'aged' });
    const next = async () =>
      (await db.rows<{ next: Date }>(`SELECT next_run_at AS next FROM $schema.schedules WHERE name = 'aged'`))[0]?.next;
    const fire = async (hoursAgo: number[]) =>
      db.rows(
        `SELECT $schema.fire_schedule('aged', $1,
           ARRAY(SELECT date_trunc('hour', now()) - h * interval '1 hour' FROM unnest($2::integer[]) h), $1)`,
        [await next(), hoursAgo],
      );
    await fire([30, 29, 28, 27, 26, 2, 1]);
    const runs = async () =>
      (
        await db.rows<{ h: number }>(
          `SELECT extract(epoch FROM date_trunc('hour', now()) - tick)::integer / 3600 AS h
           FROM $schema.schedule_runs WHERE schedule = 'aged' ORDER BY tick`,
        )
      ).map((r) => r.h);
    // the jobs of 30, 29 and 27 hours ago finish; 28's waits
    await db.pool.query(
      `DELETE FROM "${db.schema}".jobs WHERE queue = 'aged'
       AND run_at IN (SELECT date_trunc('hour', now()) - h * interval '1 hour' FROM unnest('{30,29,27}'::integer[]) h)`,
    );
    await fire([]);
    expect(await runs()).toEqual([28, 27, 26, 2, 1]);
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'aged'`);
    await fire([]);
    expect(await runs()).toEqual([2, 1]);
    await db.tusk.schedules.remove('aged');
  });

  it("a new or resumed schedule starts from the database's clock, not from a process clock minutes behind it", async () => {
    const dbSecond = async () =>
      (
        await db.rows<{ ms: number }>(`SELECT (extract(epoch FROM date_trunc('second', now())) * 1000)::float8 AS ms`)
      )[0]?.ms as number;
    // this process's Date five minutes behind the database's (timers stay real)
    const behind = async <T>(call: () => Promise<T>): Promise<T> => {
      vi.useFakeTimers({ toFake: ['Date'], now: Date.now() - 5 * 60_000 });
      try {
        return await call();
      } finally {
        vi.useRealTimers();
      }
    };
    const setAt = await dbSecond();
    const info = await behind(() => db.tusk.schedules.set('skewed', '* * * * * *', { queue: 'skewed', backfill: 3 }));
    expect(info.nextRunAt?.getTime()).toBeGreaterThanOrEqual(setAt);
    await fireDueSchedules(await db.tusk.pool(), db.schema, 1000);
    // no tick from before it was set: neither the last minute's (late) nor backfilled (missed) ones
    const ticks = (await tickJobs('skewed')).map((j) => j.tick.getTime());
    expect(ticks.length).toBeGreaterThan(0);
    expect(ticks.filter((t) => t < setAt)).toEqual([]);
    await db.tusk.schedules.pause('skewed');
    const resumedAt = await dbSecond();
    const resumed = await behind(() => db.tusk.schedules.resume('skewed'));
    expect(resumed?.nextRunAt?.getTime()).toBeGreaterThanOrEqual(resumedAt);
    await db.tusk.schedules.remove('skewed');
    await db.pool.query(`DELETE FROM "${db.schema}".jobs WHERE queue = 'skewed'`);
  });

  it('a tick already enqueued is never enqueued again, whoever tries', async () => {
    await db.tusk.schedule('once', '* * * * * *', { queue: 'once' });
    const [row] = await db.rows<{ next: Date }>(
      `SELECT next_run_at AS next FROM $schema.schedules WHERE name = 'once'`,
    );
    const tick = row?.next as Date;
    const fire = (expected: Date) =>
      db.rows<{ n: number }>(`SELECT $schema.fire_schedule('once', $1, ARRAY[$2::timestamptz], $3) AS n`, [
        expected,
        tick,
        new Date(tick.getTime() + 1000),
      ]);
    expect((await fire(tick))[0]?.n).toBe(1);
    expect((await fire(tick))[0]?.n).toBe(0); // the next tick moved on
    await db.pool.query(`UPDATE "${db.schema}".schedules SET next_run_at = $1 WHERE name = 'once'`, [tick]);
    expect((await fire(tick))[0]?.n).toBe(0); // the (schedule, tick) key refuses it
    expect(await tickJobs('once')).toHaveLength(1);
    await db.tusk.schedules.remove('once');
  });

  it('bad schedules are refused with the field named', async () => {
    const cases: Array<[() => Promise<unknown>, RegExp]> = [
      [() => db.tusk.schedule('x', '61 * * * *'), /^cron: .*minute/],
      [() => db.tusk.schedule('x', '* * * * * * *'), /^cron: /],
      [() => db.tusk.schedule('x', '0 3 * * *', { tz: 'Mars/Base' }), /^options\.tz: /],
      [() => db.tusk.schedule('', '0 3 * * *'), /^name: must not be empty/],
      [() => db.tusk.schedule('x', '0 3 * * *', { backfill: -1 }), /^options\.backfill/],
      [() => db.tusk.schedule('x', '0 3 * * *', { every: 1 } as never), /^options: unknown option "every"/],
      [() => db.tusk.schedule('x', '0 3 * * *', { payload: Number.NaN }), /^options\.payload/],
    ];
    for (const [call, message] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TuskValidationError);
      expect((error as Error).message).toMatch(message);
    }
    expect(await db.tusk.schedules.get('x')).toBeNull();
  });

  it('a crontab file: parsed, synced, stale entries removed, API schedules left alone', async () => {
    const text = [
      '# cron                 name            options                          payload',
      // the payload aligned in its column (before, the spaces before it made an option "")
      '0 3 * * *              nightly         task=report tenant=acme tz=Europe/Paris   {"kind": "daily"}',
      '*/30 * * * * *         heartbeat       queue=ops priority=-1',
      '0 9 * * MON-FRI        weekdays',
      '0 0 * * * MON          six-fields      backfill=2',
      '@hourly                hourly          maxAttempts=2',
      '',
    ].join('\n');
    const entries = parseCrontab(text, 'tusk.crontab');
    expect(entries).toEqual([
      {
        name: 'nightly',
        cron: '0 3 * * *',
        options: { task: 'report', tenant: 'acme', tz: 'Europe/Paris', payload: { kind: 'daily' } },
      },
      { name: 'heartbeat', cron: '*/30 * * * * *', options: { queue: 'ops', priority: -1 } },
      { name: 'weekdays', cron: '0 9 * * MON-FRI', options: {} },
      { name: 'six-fields', cron: '0 0 * * * MON', options: { backfill: 2 } },
      { name: 'hourly', cron: '@hourly', options: { maxAttempts: 2 } },
    ]);
    await db.tusk.schedule('api-made', '0 1 * * *');
    expect(await db.tusk.schedules.syncCrontab(entries)).toEqual({
      set: ['nightly', 'heartbeat', 'weekdays', 'six-fields', 'hourly'],
      removed: [],
    });
    expect(await db.tusk.schedules.syncCrontab(entries.slice(0, 2))).toEqual({
      set: ['nightly', 'heartbeat'],
      removed: expect.arrayContaining(['weekdays', 'six-fields', 'hourly']),
    });
    const names = (await db.tusk.schedules.list()).map((s) => s.name);
    expect(names).toEqual(expect.arrayContaining(['api-made', 'nightly', 'heartbeat']));
    expect(names).not.toContain('hourly');
    expect((await db.tusk.schedules.get('nightly'))?.source).toBe('crontab');

    for (const [bad, message] of [
      ['0 3 * * *', /^f:1: expected <cron expression> <name>/],
      ['0 3 * * * a colour=red', /^f:1: unknown option "colour=red"/],
      ['0 3 * * * a {"x": }', /^f:1: the payload is not valid JSON/],
      ['# ok\n0 3 * * * a\n0 4 * * * a', /^f:3: schedule "a" is defined twice/],
    ] as const) {
      expect(() => parseCrontab(bad, 'f')).toThrow(message);
    }
    await expect(db.tusk.schedules.syncCrontab(parseCrontab('0 3 * * * bad-one backfill=-2', 'f'))).rejects.toThrow(
      /^schedule bad-one: options\.backfill/,
    );
    await expect(db.tusk.schedules.syncCrontab(parseCrontab('0 3 * * * bad-two tz=Moon/Base', 'f'))).rejects.toThrow(
      /^schedule bad-two: options\.tz: /,
    );
    for (const name of ['api-made', 'nightly', 'heartbeat']) await db.tusk.schedules.remove(name);
  });
});
