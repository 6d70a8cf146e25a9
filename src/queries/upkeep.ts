import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** What a pass of the queue's upkeep did (reap, promote, expire, partitions); see maintain. */
export interface UpkeepResult {
  released?: number;
  dead?: number;
  workers?: number;
  promoted?: number;
  expired?: number;
  partitions?: number;
  /** Steps that failed (rolled back on their own; the others ran). */
  errors: Array<{ step: string; code: string; message: string }>;
}

/** A pass of the queue's upkeep, if no other process is running one (null then). */
export async function maintain(db: Queryable, schema: string, graceMs: number): Promise<UpkeepResult | null> {
  const { rows } = await db.query<{ r: UpkeepResult | null }>(`SELECT ${ident(schema)}.maintain($1) AS r`, [graceMs]);
  return rows[0]?.r ?? null;
}
