import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** Cancels a job; returns its state after the call, null for an unknown id. */
export async function cancelJob(db: Queryable, schema: string, id: string): Promise<string | null> {
  const { rows } = await db.query<{ state: string | null }>(`SELECT ${ident(schema)}.cancel_job($1)::text AS state`, [
    id,
  ]);
  return rows[0]?.state ?? null;
}
