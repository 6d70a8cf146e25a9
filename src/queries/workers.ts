import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** What a worker registers: who it is and what it serves (`WorkerRow` is how it is listed). */
export interface WorkerRegistration {
  /** Its id from an earlier registration, kept if free; null: a new one. */
  id: number | null;
  name: string;
  host: string;
  pid: number;
  /** null: all queues. */
  queues: string[] | null;
  concurrency: number;
  version: string;
}

/**
 * Registers a worker and takes its session lock, on the connection that must stay open
 * while the worker lives. Returns its id (the old one when re-registering, if free).
 */
export async function registerWorker(db: Queryable, schema: string, w: WorkerRegistration): Promise<number> {
  const { rows } = await db.query<{ id: number }>(
    `SELECT ${ident(schema)}.register_worker($1, $2, $3, $4, $5, $6, $7) AS id`,
    [w.id, w.name, w.host, w.pid, w.queues, w.concurrency, w.version],
  );
  const id = rows[0]?.id;
  if (id === undefined) throw new Error('register_worker returned no id');
  return id;
}

export async function unregisterWorker(db: Queryable, schema: string, id: number): Promise<void> {
  await db.query(`SELECT ${ident(schema)}.unregister_worker($1)`, [id]);
}

export interface HeartbeatResult {
  alive: boolean;
  cancelled: string[];
  lost: string[];
  /** How long the shortest lease still held runs, counted from the server's now(); null if none. */
  lease_left_ms: number | null;
}

/** Marks the worker alive, extends its leases, reports cancelled and lost jobs. */
export async function heartbeat(
  db: Queryable,
  schema: string,
  worker: number,
  leases: { ids: string[]; tokens: string[] },
  leaseMs: number,
): Promise<HeartbeatResult> {
  const { rows } = await db.query<HeartbeatResult>(
    `SELECT alive, cancelled, lost, lease_left_ms FROM ${ident(schema)}.heartbeat($1, $2::bigint[], $3::bigint[], $4)`,
    [worker, leases.ids, leases.tokens, leaseMs],
  );
  return rows[0] ?? { alive: false, cancelled: [], lost: [], lease_left_ms: null };
}
