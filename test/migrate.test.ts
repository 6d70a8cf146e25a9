import { describe, expect, it } from 'vitest';
import { Tusk, TuskSchemaError } from '../src/index.js';
import { LATEST_VERSION, loadMigrations } from '../src/migrate/migrations.js';
import { useTestDb } from './helpers.js';

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

  it('says to migrate when the schema does not exist', async () => {
    const tusk = db.another({ schema: `${db.schema}_missing` });
    await expect(tusk.enqueue('x')).rejects.toThrow(/run `tusk migrate`/);
    await expect(tusk.worker({ tasks: {} }).start()).rejects.toThrow(/does not exist: run `tusk migrate`/);
  });

  it('rejects a schema name that is not a plain identifier', () => {
    expect(() => new Tusk({ schema: 'tusk; DROP TABLE x' })).toThrow(/schema: must be 1-63 letters/);
  });
});
