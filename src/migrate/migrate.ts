import type pg from 'pg';
import type { Queryable } from '../db/queryable.js';
import { ident, literal } from '../db/schema.js';
import { SQLSTATE, TuskSchemaError } from '../errors.js';
import { VERSION } from '../version.js';
import { BASELINE_VERSION, LATEST_VERSION, loadMigrations } from './migrations.js';

/** What `migrate()` did. */
export interface MigrateResult {
  /** Schema version before. 0 for a new schema. */
  from: number;
  /** Schema version after. */
  to: number;
  /** Names of the migrations applied by this call. */
  applied: string[];
}

/** Advisory lock key (second half) for migrations; the first half is hashtext(schema). */
const MIGRATION_LOCK = -1;

/**
 * Applies the pending migrations to `schema` in one transaction, under an advisory lock:
 * any number of processes may call it at once; one migrates, the others wait and find
 * nothing left to do. A new schema gets the baseline and the migrations after it. Refuses
 * a schema migrated by a newer Tusk, and one that predates the baseline; either way it
 * changes nothing.
 */
export async function migrate(pool: pg.Pool, schema: string): Promise<MigrateResult> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SET LOCAL lock_timeout = '120s'`);
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1), $2)', [schema, MIGRATION_LOCK]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${ident(schema)}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${ident(schema)}.migrations (
         version integer PRIMARY KEY,
         name text NOT NULL,
         tusk_version text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const from = await currentVersion(client, schema);
    refuseNewer(schema, from);
    refuseSquashed(schema, from);
    const applied: string[] = [];
    for (const migration of loadMigrations()) {
      if (migration.version <= from) continue;
      await client.query(render(migration.sql, schema));
      await client.query(`INSERT INTO ${ident(schema)}.migrations (version, name, tusk_version) VALUES ($1, $2, $3)`, [
        migration.version,
        migration.name,
        VERSION,
      ]);
      applied.push(migration.name);
    }
    await client.query('COMMIT');
    return { from, to: Math.max(from, LATEST_VERSION), applied };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * Checks that `schema` is migrated to exactly this version of Tusk, with a clear error
 * saying what to do otherwise. Returns the version.
 */
export async function checkSchema(db: Queryable, schema: string): Promise<number> {
  let version: number;
  try {
    version = await currentVersion(db, schema);
  } catch (error) {
    if ((error as { code?: string }).code === SQLSTATE.undefinedTable) version = 0;
    else throw error;
  }
  refuseNewer(schema, version);
  refuseSquashed(schema, version);
  if (version < LATEST_VERSION) {
    throw new TuskSchemaError(
      version === 0
        ? `Tusk schema "${schema}" does not exist: run \`tusk migrate\` or \`await tusk.migrate()\` first`
        : `Tusk schema "${schema}" is at version ${version}, this Tusk needs ${LATEST_VERSION}: run \`tusk migrate\``,
    );
  }
  return version;
}

async function currentVersion(db: Queryable, schema: string): Promise<number> {
  const { rows } = await db.query<{ v: number | null }>(`SELECT max(version) AS v FROM ${ident(schema)}.migrations`);
  return rows[0]?.v ?? 0;
}

function refuseNewer(schema: string, version: number): void {
  if (version > LATEST_VERSION) {
    throw new TuskSchemaError(
      `Tusk schema "${schema}" was migrated by a newer Tusk (schema version ${version}, this Tusk ${VERSION} knows up to ${LATEST_VERSION}): upgrade Tusk`,
    );
  }
}

/**
 * Refuses a schema that a development build left at a version below the baseline's: the
 * migrations that would lead from it to the baseline were squashed into the baseline.
 */
function refuseSquashed(schema: string, version: number): void {
  if (version > 0 && version < BASELINE_VERSION) {
    throw new TuskSchemaError(
      `Tusk schema "${schema}" is at version ${version}, which predates the squashed history: the migrations of ` +
        `Tusk's development before 0.1 were squashed into one baseline (version ${BASELINE_VERSION}), and this Tusk ` +
        `cannot upgrade a schema that stopped part of the way. Either drop the schema (\`DROP SCHEMA ${ident(schema)} ` +
        `CASCADE\`: its jobs and history are lost) and run \`tusk migrate\` to create it again, or first upgrade it ` +
        `to version ${BASELINE_VERSION} with a build of Tusk from before the squash (commit 98a8ea1 or earlier: its ` +
        `sql/ folder holds the numbered migrations up to version ${BASELINE_VERSION}), then use this one.`,
    );
  }
}

/** Fills in the schema placeholders of a migration. */
export function render(sql: string, schema: string): string {
  return sql.replace(/:SCHEMA_LITERAL\b/g, literal(schema)).replace(/:SCHEMA\b/g, ident(schema));
}

/** Drops `schema` and everything in it (the demo and tests start from scratch). */
export async function dropSchema(db: Queryable, schema: string): Promise<void> {
  await db.query(`DROP SCHEMA IF EXISTS ${ident(schema)} CASCADE`);
}

/** The demo's default schema, and the comment on any schema the demo made. */
export const DEMO_SCHEMA = 'tusk_demo';
const DEMO_MARK = 'made by `tusk demo`, which drops it and makes it again at each run';

/**
 * Drops `schema` for the demo to make again, unless it is a schema the demo did not make:
 * one without the demo's mark (the default `tusk_demo` of versions that did not mark it
 * excepted). Returns false, and drops nothing, then.
 */
export async function dropDemoSchema(db: Queryable, schema: string): Promise<boolean> {
  const { rows } = await db.query<{ mark: string | null }>(
    `SELECT obj_description(oid, 'pg_namespace') AS mark FROM pg_namespace WHERE nspname = $1`,
    [schema],
  );
  if (rows.length > 0 && rows[0]?.mark !== DEMO_MARK && schema !== DEMO_SCHEMA) return false;
  await dropSchema(db, schema);
  return true;
}

/** Marks `schema` as the demo's (see dropDemoSchema). */
export async function markDemoSchema(db: Queryable, schema: string): Promise<void> {
  await db.query(`COMMENT ON SCHEMA ${ident(schema)} IS ${literal(DEMO_MARK)}`);
}
