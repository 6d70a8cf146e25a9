import type { Queryable } from '../db/queryable.js';
import { ident, literal } from '../db/schema.js';

/** The least-privilege roles of a schema, by what they are for. */
export function roleNames(prefix: string): { producer: string; worker: string; api: string } {
  return { producer: `${prefix}_producer`, worker: `${prefix}_worker`, api: `${prefix}_api` };
}

/**
 * Creates (if missing) the three NOLOGIN roles and grants them what they need on
 * `schema`, nothing more (the functions they call that run as the schema's owner are
 * listed in "API tokens and roles", the last part of sql/000030_baseline.sql).
 * What migrations create later as the schema's owner is granted to the API role as it is
 * created (the owner's default privileges). Idempotent. Needs CREATEROLE and the schema's
 * ownership (or a superuser).
 */
export async function createRoles(db: Queryable, schema: string, prefix: string): Promise<void> {
  const s = ident(schema);
  const r = roleNames(prefix);
  const [producer, worker, api] = [ident(r.producer), ident(r.worker), ident(r.api)];
  const { rows } = await db.query<{ owner: string }>(
    'SELECT nspowner::regrole::text AS owner FROM pg_namespace WHERE nspname = $1',
    [schema],
  );
  const owner = rows[0]?.owner;
  if (owner === undefined) throw new Error(`schema "${schema}" does not exist`);
  const create = (name: string) =>
    `IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ${literal(name)}) THEN
       CREATE ROLE ${ident(name)} NOLOGIN; END IF;`;
  await db.query(`DO $$ BEGIN ${create(r.producer)} ${create(r.worker)} ${create(r.api)} END $$`);
  // What later migrations create as the schema's owner is the API role's as it is created
  // (the owner's default privileges): without it, an upgrade that added a table left the
  // upkeep failing on it until this ran again. Migrations run by another role get nothing
  // from it (the docs say to run this again then). One string: one transaction.
  const future = `ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA ${s}`;
  await db.query(`
    GRANT USAGE ON SCHEMA ${s} TO ${producer}, ${worker}, ${api};
    -- producers: enqueue (jobs, staging, the dedup and dependency paths), read jobs and history, check the
    -- schema, apply the task definitions workers recorded
    GRANT SELECT ON ${s}.migrations, ${s}.jobs, ${s}.job_history, ${s}.task_definitions TO ${producer};
    GRANT SELECT, INSERT ON ${s}.jobs, ${s}.staged_jobs TO ${producer};
    GRANT USAGE ON SEQUENCE ${s}.jobs_id_seq TO ${producer};
    GRANT EXECUTE ON FUNCTION ${s}.enqueue_dedup(jsonb), ${s}.enqueue_job(text, jsonb, jsonb),
      ${s}.enqueue_jobs(jsonb), ${s}.enqueue_flow(jsonb) TO ${producer};
    -- workers in any language: the lease functions, no table
    GRANT EXECUTE ON FUNCTION ${s}.fetch_jobs(integer, integer, text, text), ${s}.ack_job(bigint, bigint, jsonb),
      ${s}.nack_job(bigint, bigint, integer, jsonb), ${s}.extend_lease(bigint, bigint, integer),
      ${s}.working(bigint, bigint, integer) TO ${worker};
    -- the API server: what its endpoints and its upkeep do, on every table but api_tokens
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${s} TO ${api};
    REVOKE ALL ON ${s}.api_tokens FROM ${api};
    REVOKE INSERT, UPDATE, DELETE ON ${s}.migrations FROM ${api};
    GRANT USAGE ON ALL SEQUENCES IN SCHEMA ${s} TO ${api};
    GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${s} TO ${api};
    ${future} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${api};
    ${future} GRANT USAGE ON SEQUENCES TO ${api};
    ${future} GRANT EXECUTE ON FUNCTIONS TO ${api};`);
}
