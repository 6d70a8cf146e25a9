import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, expect, inject } from 'vitest';
import { Tusk, type TuskOptions, type Worker, type WorkerOptions } from '../src/index.js';
import { dropSchema } from '../src/migrate/migrate.js';

export const databaseUrl = (): string => inject('databaseUrl');

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a truthy value; throws after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 10_000, everyMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(everyMs);
  }
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
  };
}
