import { describe, expect, it } from 'vitest';
import { Tusk, TuskSchemaError } from '../src/index.js';
import { checkSchema } from '../src/migrate/migrate.js';
import { BASELINE_VERSION, LATEST_VERSION, loadMigrations } from '../src/migrate/migrations.js';
import { recorder, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

describe('migrate', () => {
  it('ten processes migrating one fresh schema at once: one migrates, all succeed', async () => {
    const schema = `${db.schema}_race`;
    const tusks = Array.from({ length: 10 }, () => db.another({ schema, maxConnections: 2 }));
    try {
      const results = await Promise.all(tusks.map((t) => t.migrate()));
      expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
      expect(results.every((r) => r.to === LATEST_VERSION)).toBe(true);
      const versions = await db.rows<{ version: number }>(`SELECT version FROM "${schema}".migrations ORDER BY 1`);
      expect(versions.map((v) => v.version)).toEqual(loadMigrations().map((m) => m.version));
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('a migration in progress does not disturb the live workers check (its lock is not a worker id)', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1), -1)', [db.schema]); // as migrate() holds it
      const [row] = await db.rows<{ ids: number[] }>('SELECT $schema.live_worker_ids() AS ids');
      expect(row?.ids).toEqual([]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('starts a new schema from the baseline, recorded at its version', async () => {
    const [first] = loadMigrations();
    expect(first).toMatchObject({ version: BASELINE_VERSION, name: '000030_baseline' });
    const schema = `${db.schema}_fresh`;
    const tusk = db.another({ schema });
    try {
      const result = await tusk.migrate();
      expect(result.from).toBe(0);
      expect(result.applied[0]).toBe('000030_baseline');
      const versions = await db.rows<{ version: number }>(`SELECT version FROM "${schema}".migrations ORDER BY 1`);
      expect(versions[0]?.version).toBe(BASELINE_VERSION);
      expect(await checkSchema(db.pool, schema)).toBe(LATEST_VERSION);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('refuses a schema that a development build left below the baseline, and changes nothing', async () => {
    const schema = `${db.schema}_dev`;
    const tusk = db.another({ schema });
    // what a development build left at version 12 (its tables aside): the migrations table
    // as migrate() makes it, with its last migration recorded
    await db.pool.query(`CREATE SCHEMA "${schema}"`);
    await db.pool.query(
      `CREATE TABLE "${schema}".migrations (
         version integer PRIMARY KEY,
         name text NOT NULL,
         tusk_version text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    await db.pool.query(
      `INSERT INTO "${schema}".migrations (version, name, tusk_version) VALUES (12, 'a development migration', '0.1.0')`,
    );
    const contents = () =>
      db.rows(
        `SELECT (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c WHERE c.relnamespace = n.oid) AS relations,
                (SELECT count(*)::integer FROM pg_proc p WHERE p.pronamespace = n.oid) AS functions,
                (SELECT count(*)::integer FROM pg_type t WHERE t.typnamespace = n.oid) AS types,
                (SELECT array_agg(m.version) FROM "${schema}".migrations m) AS versions
         FROM pg_namespace n WHERE n.nspname = $1`,
        [schema],
      );
    try {
      const before = await contents();
      expect(before[0]).toMatchObject({ relations: ['migrations', 'migrations_pkey'], functions: 0, versions: [12] });

      const refused = await tusk.migrate().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(TuskSchemaError);
      expect((refused as Error).message).toMatch(
        new RegExp(`"${schema}" is at version 12, which predates the squashed history`),
      );
      expect((refused as Error).message).toMatch(/baseline \(version 30\)/);
      expect((refused as Error).message).toMatch(/DROP SCHEMA .* CASCADE.*run `tusk migrate`/);
      expect((refused as Error).message).toMatch(/a build of Tusk from before the squash \(commit 98a8ea1 or earlier/);
      expect(await contents()).toEqual(before);

      await expect(checkSchema(db.pool, schema)).rejects.toThrow(TuskSchemaError);
      await expect(checkSchema(db.pool, schema)).rejects.toThrow(/version 12, which predates the squashed history/);
      await expect(tusk.worker({ tasks: {} }).start()).rejects.toThrow(/predates the squashed history/);
      expect(await contents()).toEqual(before);

      // the bounds: every version from 1 to the one before the baseline is refused
      for (const version of [1, BASELINE_VERSION - 1]) {
        await db.pool.query(`UPDATE "${schema}".migrations SET version = $1`, [version]);
        await expect(tusk.migrate()).rejects.toThrow(new RegExp(`at version ${version}, which predates`));
        await expect(checkSchema(db.pool, schema)).rejects.toThrow(new RegExp(`at version ${version}, which predates`));
      }
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('is a no-op when up to date', async () => {
    const result = await db.tusk.migrate();
    expect(result).toEqual({ from: LATEST_VERSION, to: LATEST_VERSION, applied: [] });
  });

  it('refuses a schema migrated by a newer Tusk, with a clear error', async () => {
    const schema = `${db.schema}_newer`;
    const tusk = db.another({ schema });
    try {
      await tusk.migrate();
      await db.pool.query(
        `INSERT INTO "${schema}".migrations (version, name, tusk_version) VALUES ($1, 'future', '99.0.0')`,
        [LATEST_VERSION + 1],
      );
      await expect(tusk.migrate()).rejects.toThrow(TuskSchemaError);
      await expect(tusk.migrate()).rejects.toThrow(/migrated by a newer Tusk/);
      const worker = tusk.worker({ tasks: {} });
      await expect(worker.start()).rejects.toThrow(/newer Tusk/);
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    }
  });

  it('says to migrate when the schema does not exist, and only that', async () => {
    const said = recorder();
    const tusk = db.another({ schema: `${db.schema}_missing`, logger: said.log });
    await expect(tusk.enqueue('x')).rejects.toThrow(/run `tusk migrate`/);
    // before, a warning (with a stack) about the task definitions' table came first
    expect(said.lines.filter((l) => l.level !== 'debug')).toEqual([]);
    await expect(tusk.worker({ tasks: {} }).start()).rejects.toThrow(/does not exist: run `tusk migrate`/);
  });

  it('rejects a schema name that is not a plain identifier', () => {
    expect(() => new Tusk({ schema: 'tusk; DROP TABLE x' })).toThrow(/schema: must be 1-63 letters/);
  });
});
