import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliEnv, exited, startWorker, tusk, useExecutionsTable } from './cli.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const env = () => cliEnv(db.url, db.schema);

useExecutionsTable(db);

describe('tusk CLI', () => {
  it('migrate: up to date, and a fresh schema with --schema', async () => {
    expect((await tusk(env(), 'migrate')).stdout).toMatch(/is up to date/);
    const schema = `${db.schema}_cli`;
    try {
      const r = await tusk(env(), 'migrate', '--schema', schema);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`schema "${schema}" migrated from version 0`));
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('enqueue prints the id; status prints the job as JSON', async () => {
    const r = await tusk(
      env(),
      'enqueue',
      'hello',
      '{"name":"cli"}',
      '--tenant',
      'acme',
      '--queue',
      'q1',
      '--delay',
      '60000',
      '--priority',
      '2',
    );
    expect(r.code).toBe(0);
    const id = r.stdout.trim();
    expect(id).toMatch(/^\d+$/);
    const s = await tusk(env(), 'status', id);
    expect(s.code).toBe(0);
    expect(JSON.parse(s.stdout)).toMatchObject({
      id,
      task: 'hello',
      tenant: 'acme',
      queue: 'q1',
      state: 'scheduled',
      priority: 2,
      payload: { name: 'cli' },
    });
  });

  it('tenants: set, pause, list, default, stats; bad slots refused', async () => {
    const set = await tusk(env(), 'tenants', 'set', 'cli-acme', '--slots', '5', '--per-key', '2');
    expect(set.code).toBe(0);
    expect(set.stdout).toMatch(/cli-acme\s+5\s+2\s+-\s+forever\s+no/);
    expect((await tusk(env(), 'tenants', 'pause', 'cli-acme')).stdout).toMatch(/cli-acme\s+5\s+2\s+-\s+forever\s+yes/);
    expect(JSON.parse((await tusk(env(), 'tenants', 'get', 'cli-acme')).stdout)).toMatchObject({
      slots: 5,
      perKey: 2,
      paused: true,
    });
    expect((await tusk(env(), 'tenants', 'default', '--slots', '3')).stdout).toMatch(/default slots: 3/);
    expect((await tusk(env(), 'tenants', 'set', 'cli-acme', '--slots', 'default')).stdout).toMatch(/3 \(default\)/);
    expect((await tusk(env(), 'tenants', 'default', '--slots', 'unlimited')).stdout).toMatch(
      /default slots: unlimited/,
    );
    expect((await tusk(env(), 'tenants', 'list')).stdout).toMatch(/cli-acme/);
    const bad = await tusk(env(), 'tenants', 'set', 'cli-acme', '--slots', '0');
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/^tusk: --slots: takes a positive integer or default/);
    const unknown = await tusk(env(), 'tenants', 'get', 'cli-nobody');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe('tusk: no tenant named cli-nobody: it has no settings and no unfinished jobs\n');
    const stats = await tusk(env(), 'stats', '--json');
    expect(JSON.parse(stats.stdout)).toHaveProperty('queues');
  });

  it('tenants: rate limits and retention', async () => {
    const set = await tusk(env(), 'tenants', 'set', 'cli-rated', '--rate', '100/60000', '--retention', '90 days');
    expect(set.stdout).toMatch(/cli-rated\s+unlimited\s+-\s+100\/60000ms\s+90 days\s+no/);
    expect(
      (await tusk(env(), 'tenants', 'set', 'cli-rated', '--rate', 'none', '--retention', 'default')).stdout,
    ).toMatch(/cli-rated\s+unlimited\s+-\s+-\s+forever/);
    expect((await tusk(env(), 'tenants', 'default', '--retention', '30 days')).stdout).toMatch(
      /default retention: 30 days/,
    );
    expect((await tusk(env(), 'tenants', 'default', '--retention', 'forever')).stdout).toMatch(
      /default retention: forever/,
    );
    const bad = await tusk(env(), 'tenants', 'set', 'cli-rated', '--rate', '100');
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/^tusk: --rate: takes <limit>\/<window ms>/);
    const badRetention = await tusk(env(), 'tenants', 'set', 'cli-rated', '--retention', 'a while');
    expect(badRetention.stderr).toMatch(/settings\.retention: must be a period like '30 days'/);
  });

  it('schedules: set, list, pause, resume, remove, sync a crontab file; `worker --crontab`; prune with progress', async () => {
    const set = await tusk(
      env(),
      'schedules',
      'set',
      'cli-nightly',
      '0 3 * * *',
      '--task',
      'report',
      '--tz',
      'Europe/Paris',
      '--payload',
      '{"a":1}',
    );
    expect(set.code).toBe(0);
    expect(set.stdout).toMatch(/cli-nightly\s+0 3 \* \* \*\s+Europe\/Paris\s+report/);
    const dir = await mkdtemp(join(tmpdir(), 'tusk-crontab-'));
    const file = join(dir, 'tusk.crontab');
    await writeFile(file, '# test\n*/10 * * * *  cli-ten  task=record queue=cron-cli {"ms": 1}\n0 4 * * *  cli-four\n');
    const sync = await tusk(env(), 'schedules', 'sync', file);
    expect(sync.stderr).toMatch(/2 schedules set/);
    const list = JSON.parse((await tusk(env(), 'schedules', 'list', '--json')).stdout) as Array<{
      name: string;
      payload: unknown;
    }>;
    expect(list.map((s) => s.name).sort()).toEqual(['cli-four', 'cli-nightly', 'cli-ten']);
    expect(list.find((s) => s.name === 'cli-ten')?.payload).toEqual({ ms: 1 });

    await writeFile(file, '*/10 * * * *  cli-ten  task=record queue=cron-cli\n');
    const worker = startWorker(env(), '-q', 'cron-cli', '--crontab', file);
    try {
      await eventually(async () => !(await tusk(env(), 'schedules', 'list')).stdout.includes('cli-four'), 20_000, 200);
    } finally {
      worker.kill('SIGTERM');
    }
    expect(await exited(worker)).toBe(0);
    // a mistake in the crontab: the command stops before the worker starts (before, it
    // started, claimed, then stopped)
    const bad = join(dir, 'bad.crontab');
    const registered = async () =>
      (
        await db.rows<{ n: string }>(
          `SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM $schema.workers_id_seq`,
        )
      )[0]?.n;
    const before = await registered();
    // a line that does not parse, and one that parses but whose cron expression is wrong
    for (const [line, message] of [
      ['*/10 * * * *  cli-bad  colour=blue', /bad\.crontab:1: unknown option "colour=blue"/],
      ['61 * * * *  cli-bad  task=record', /schedule cli-bad: cron: .*minute/i],
    ] as const) {
      await writeFile(bad, `${line}\n`);
      const refused = startWorker(env(), '-q', 'cron-cli', '--crontab', bad);
      let said = '';
      refused.stderr?.on('data', (d) => {
        said += String(d);
      });
      expect(await exited(refused)).toBe(1);
      expect(said).toMatch(message);
    }
    expect(await registered()).toBe(before);
    const paused = await tusk(env(), 'schedules', 'pause', 'cli-nightly');
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout.split('\n')[0]).toMatch(/last job +paused$/);
    expect(paused.stdout.split('\n')[2]).toMatch(/^cli-nightly .* \d{4}-\d\d-\d\dT[\d:.]+Z$/);
    expect((await tusk(env(), 'schedules', 'resume', 'cli-nightly')).stdout.split('\n')[2]).toMatch(/ -$/);
    expect(await tusk(env(), 'schedules', 'pause', 'cli-none')).toMatchObject({
      code: 1,
      stderr: 'tusk: no schedule named cli-none\n',
    });
    const removed = await tusk(env(), 'schedules', 'remove', 'cli-nightly');
    expect(removed).toMatchObject({
      code: 0,
      stdout: 'removed schedule cli-nightly (its ticks enqueued and not started are cancelled)\n',
    });
    const gone = await tusk(env(), 'schedules', 'remove', 'cli-nightly');
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/no schedule named cli-nightly/);
    const badCron = await tusk(env(), 'schedules', 'set', 'x', '99 * * * *');
    expect(badCron.code).toBe(1);
    expect(badCron.stderr).toMatch(/^tusk: cron: /);

    await db.pool.query(
      `INSERT INTO "${db.schema}".job_history (id, tenant, queue, task, payload, priority, state, attempts,
         max_attempts, concurrency_key, created_at, run_at, finished_at)
       SELECT 9000000 + g, 'cli-old', 'q', 't', 'null', 0, 'succeeded', 1, 5, '', f, f, f
       FROM (SELECT g, now() - interval '20 days' - g * interval '1 minute' AS f FROM generate_series(1, 30) g) x`,
    );
    await tusk(env(), 'tenants', 'set', 'cli-old', '--retention', '10 days');
    const prune = await tusk(env(), 'prune', '--batch', '10');
    expect(prune.code).toBe(0);
    expect(prune.stdout).toMatch(/deleted 10 rows, more to go/);
    expect(prune.stdout).toMatch(/done in [\d.]+ s: 0 partitions dropped, 30 rows deleted/);
  });

  it('enqueue --depends-on: the job waits for the ones it names', async () => {
    const first = (await tusk(env(), 'enqueue', 'hello', 'null', '--queue', 'cli-deps')).stdout.trim();
    const r = await tusk(
      env(),
      'enqueue',
      'hello',
      'null',
      '--depends-on',
      `${first}, ${first}`,
      '--on-dependency-failure',
      'continue',
    );
    expect(r.code, r.stderr).toBe(0);
    const s = await tusk(env(), 'status', r.stdout.trim());
    expect(JSON.parse(s.stdout)).toMatchObject({ state: 'scheduled', waitingOn: 1, dependsOn: [first] });
    const unknown = await tusk(env(), 'enqueue', 'hello', 'null', '--depends-on', `${first},9000000000000000000`);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^tusk: --depends-on\[1\]: is not a job: no job has id 9000000000000000000/);
    const bad = await tusk(env(), 'enqueue', 'hello', 'null', '--depends-on', 'x');
    expect(bad.stderr).toMatch(/^tusk: --depends-on\.0: must be a job id/);
  });

  it('bad input: clear errors and exit code 1', async () => {
    const badJson = await tusk(env(), 'enqueue', 'hello', '{nope');
    expect(badJson.code).toBe(1);
    expect(badJson.stderr).toMatch(/^tusk: payload: is not valid JSON/);
    const badDelay = await tusk(env(), 'enqueue', 'hello', '{}', '--delay', '-5');
    expect(badDelay.code).not.toBe(0);
    expect(badDelay.stderr).toBe('tusk: --delay: must be an integer from 0 to 3155760000000 (got "-5")\n');
    const missing = await tusk(env(), 'status', '123456789');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no job with id 123456789/);
    const noModule = await tusk(env(), 'worker', '--require', './does-not-exist.mjs');
    expect(noModule.code).toBe(1);
  });

  it('a worker started while the database is out of reach waits for it (no exit), and stops on SIGTERM', async () => {
    const worker = startWorker({ ...env(), DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' });
    let stderr = '';
    worker.stderr?.on('data', (d) => {
      stderr += d;
    });
    await eventually(() => (stderr.match(/waiting for the database/g) ?? []).length >= 2, 10_000);
    expect(stderr).toMatch(
      /^tusk: the worker is waiting for the database: cannot connect to 127\.0\.0\.1:1: connection refused \(DATABASE_URL\); retrying in 0\.5 s\n/,
    );
    expect(worker.exitCode).toBeNull();
    worker.kill('SIGTERM');
    expect(await exited(worker)).toBe(0);
  });

  it('`tusk worker` runs the methods of the classes its module registers in setup(tusk)', async () => {
    const worker = startWorker(env(), '-q', 'greet');
    try {
      // what tusk.async(greeter).greet('bob') enqueues, written out: any producer can
      const { id } = await db.tusk.enqueue('Greeter.greet', ['bob'], {
        queue: 'greet',
        source: { type: 'Greeter', id: 'g1', method: 'greet' },
      });
      const job = await eventually(async () => {
        const j = await db.tusk.getJob(id);
        return j?.state === 'succeeded' || j?.state === 'failed' ? j : null;
      }, 20_000);
      expect(job).toMatchObject({
        state: 'succeeded',
        result: { greeting: 'g1 greets bob', pid: worker.pid },
        source: { type: 'Greeter', id: 'g1', method: 'greet' },
      });
    } finally {
      worker.kill('SIGTERM');
    }
    expect(await exited(worker)).toBe(0);
  });

  it('two `tusk worker` processes on 1 000 jobs: every job succeeds exactly once; SIGTERM stops them cleanly', async () => {
    // --prefetch as the library takes it: auto, or a number (0: none)
    const workers = [
      startWorker(env(), '-q', 'two', '--prefetch', 'auto'),
      startWorker(env(), '-q', 'two', '--concurrency', '4', '--prefetch', '0'),
    ];
    try {
      await eventually(async () => (await db.rows(`SELECT id FROM $schema.workers`)).length === 2, 20_000);
      const { ids } = await db.tusk.enqueueMany(
        Array.from({ length: 1000 }, (_, i) => ({
          task: 'record',
          payload: { i, ms: 3 },
          tenant: `t${i % 10}`,
          queue: 'two',
        })),
      );
      await eventually(
        async () => {
          const [row] = await db.rows<{ n: number }>(
            `SELECT count(*)::int AS n FROM $schema.job_history WHERE queue = 'two'`,
          );
          return row?.n === 1000;
        },
        30_000,
        100,
      );
      const perJob = await db.rows<{ job_id: string; n: number }>(
        `SELECT job_id, count(*)::int AS n FROM $schema.executions WHERE job_id = ANY($1::bigint[]) GROUP BY 1`,
        [ids],
      );
      expect(perJob).toHaveLength(1000);
      expect(perJob.every((r) => r.n === 1)).toBe(true);
      const states = await db.rows<{ state: string; n: number }>(
        `SELECT state::text, count(*)::int AS n FROM $schema.job_history WHERE queue = 'two' GROUP BY 1`,
      );
      expect(states).toEqual([{ state: 'succeeded', n: 1000 }]);
      const pids = await db.rows<{ pid: number }>(
        `SELECT DISTINCT pid FROM $schema.executions WHERE job_id = ANY($1::bigint[])`,
        [ids],
      );
      expect(pids.length).toBe(2);
    } finally {
      for (const w of workers) w.kill('SIGTERM');
    }
    expect(await Promise.all(workers.map(exited))).toEqual([0, 0]);
    expect(await db.rows(`SELECT id FROM $schema.workers`)).toEqual([]);
  });
  it('demo: refuses a schema it did not make (it drops its schema), and runs again in one it made', async () => {
    const other = `${db.schema}_app`;
    const demoSchema = `${db.schema}_demo`;
    await db.pool.query(`CREATE SCHEMA "${other}"; CREATE TABLE "${other}".orders (id int)`);
    try {
      // before, the demo dropped it, tables and all
      const refused = await tusk(env(), '--schema', other, 'demo', '--quick', '--jobs', '20');
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/not a schema the demo made/);
      expect(await db.rows('SELECT 1 FROM pg_tables WHERE schemaname = $1', [other])).toHaveLength(1);
      for (let run = 0; run < 2; run++) {
        const ran = await tusk(env(), '--schema', demoSchema, 'demo', '--quick', '--jobs', '20');
        expect(ran.code, ran.stderr).toBe(0);
      }
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${other}" CASCADE; DROP SCHEMA IF EXISTS "${demoSchema}" CASCADE`);
    }
  });
});
