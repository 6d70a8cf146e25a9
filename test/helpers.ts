import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, expect, inject } from 'vitest';
import { type Logger, Tusk, type TuskOptions, type Worker, type WorkerOptions } from '../src/index.js';
import { dropSchema } from '../src/migrate/migrate.js';

export const databaseUrl = (): string => inject('databaseUrl');

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a truthy value; throws after `timeoutMs`, saying `what` was awaited. */
export async function eventually<T>(
  check: () => Promise<T> | T,
  timeoutMs = 10_000,
  everyMs = 20,
  what = 'condition',
): Promise<Exclude<T, null | undefined | false | 0 | ''>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as Exclude<T, null | undefined | false | 0 | ''>;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    // the poll's own pace: it returns as soon as the condition holds, whatever the interval
    await sleep(everyMs);
  }
}

/**
 * Connections of their own, for transactions held open across steps (`session()` makes
 * one); each is ended after the test that made it, or after the file with `perFile`.
 */
export function useSessions(url: () => string, perFile = false): () => Promise<pg.Client> {
  const sessions: pg.Client[] = [];
  (perFile ? afterAll : afterEach)(async () => {
    for (const c of sessions.splice(0)) await c.end().catch(() => {});
  });
  return async () => {
    const c = new pg.Client({ connectionString: url() });
    await c.connect();
    sessions.push(c);
    return c;
  };
}

export interface Line {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string;
}

/** A logger that keeps what it is told: a test waits for a line rather than for time. */
export function recorder(): { log: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (_obj: object, msg?: string) => lines.push({ level, msg: msg ?? '' });
  return { log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

export interface TestDb {
  /** A migrated Tusk on this file's own schema. */
  tusk: Tusk;
  schema: string;
  url: string;
  /** A plain pool on the test database, for assertions. */
  pool: pg.Pool;
  /** Another Tusk on the same schema, like another process. */
  another(options?: Partial<TuskOptions>): Tusk;
  /** A worker that the guard checks is stopped by the end of the test. */
  worker(options: WorkerOptions, on?: Tusk): Worker;
  /** Rows of `sql`, where `$schema` stands for the quoted schema name. */
  rows<T extends pg.QueryResultRow = Record<string, unknown>>(sql: string, values?: unknown[]): Promise<T[]>;
  /**
   * Waits until the database's clock is past the time `sql` selects (one value, read once;
   * `$schema` as in `rows`), e.g. a job's `run_at`, `lease_until` or `expires_at`. Delays,
   * leases, expiry and windows are measured by that clock, which no test drives: this
   * returns as soon as it has passed, where a sleep on this process's clock only guesses.
   */
  clockPast(sql: string, values?: unknown[], timeoutMs?: number): Promise<void>;
  /**
   * Returns in a window of `perMs` of the database's clock (a rate limit's: aligned on the
   * epoch) with at least `ms` of it left, waiting for the next window if need be: what a
   * test reads in one window stays in it.
   */
  roomInWindow(perMs: number, ms: number): Promise<void>;
}

/**
 * Gives a test file its own schema, migrated before its tests and dropped after them.
 * Guard: a test that leaves a worker (made with `db.worker`) running fails.
 */
export function useTestDb(file: string, options: Partial<TuskOptions> = {}): TestDb {
  const schema = `t_${basename(file, '.test.ts').replace(/\W+/g, '_').slice(0, 30)}_${randomBytes(3).toString('hex')}`;
  const url = databaseUrl();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const instances: Tusk[] = [];
  const workers = new Set<Worker>();
  const make = (extra: Partial<TuskOptions> = {}) => {
    const t = new Tusk({ connectionString: url, schema, logger: false, maxConnections: 6, ...options, ...extra });
    instances.push(t);
    return t;
  };
  const tusk = make();

  beforeAll(() => tusk.migrate());
  afterEach(async () => {
    const left = [...workers].filter((w) => w.state === 'running' || w.state === 'starting');
    await Promise.all([...workers].map((w) => w.stop()));
    workers.clear();
    expect(left.length, 'the test left a worker running').toBe(0);
  });
  afterAll(async () => {
    await Promise.all(instances.map((t) => t.close()));
    await dropSchema(pool, schema);
    await pool.end();
  });

  return {
    tusk,
    schema,
    url,
    pool,
    another: (extra) => make(extra),
    worker(workerOptions, on = tusk) {
      const w = on.worker(workerOptions);
      workers.add(w);
      return w;
    },
    async rows(sql, values) {
      const { rows } = await pool.query(sql.replaceAll('$schema', `"${schema}"`), values);
      return rows;
    },
    async clockPast(sql, values, timeoutMs = 10_000) {
      // as text: a timestamptz keeps its microseconds, a Date would round them away
      const { rows } = await pool.query<{ at: string | null }>(
        `SELECT (${sql.replaceAll('$schema', `"${schema}"`)})::text AS at`,
        values,
      );
      const at = rows[0]?.at;
      if (!at) throw new Error(`clockPast: no time selected by ${sql}`);
      const past = async () =>
        (await pool.query<{ past: boolean }>('SELECT now() > $1::timestamptz AS past', [at])).rows[0]?.past;
      await eventually(past, timeoutMs, 10, `the database's clock passing ${at}`);
    },
    async roomInWindow(perMs, ms) {
      const { rows } = await pool.query<{ left: number }>(
        'SELECT $1::bigint - ((extract(epoch FROM now()) * 1000)::bigint % $1::bigint)::int AS left',
        [perMs],
      );
      const left = rows[0]?.left ?? perMs;
      if (left < ms) await this.clockPast(`SELECT now() + $1::int * interval '1 millisecond'`, [left], left + 10_000);
    },
  };
}
