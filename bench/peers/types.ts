// What the peer comparison needs from each queue system, implemented once per system
// (tusk.ts, graphile.ts, pgboss.ts, bullmq.ts) and used both by the parent suite
// (setup, producer side, checks) and by the worker child (bench/workers/peer-worker.ts).
import type pg from 'pg';

export type System = 'tusk' | 'graphile' | 'pgboss' | 'bullmq';
export const SYSTEMS: readonly System[] = ['tusk', 'graphile', 'pgboss', 'bullmq'];

/** `defaults`: the system's worker as it comes; `tuned`: its documented performance settings. */
export type Mode = 'defaults' | 'tuned';

/** The task every benchmark job runs, and its payload. */
export const TASK = 'noop';
export interface Payload {
  /** Sequence number of a drain job. */
  n?: number;
  /** Latency jobs: enqueue time, `performance.timeOrigin + performance.now()`. */
  t?: number;
}

export interface PeerContext {
  url: string;
  redisUrl: string;
  /** A small pool for counts and VACUUM (not used by the system itself). */
  pool: pg.Pool;
  /** Schema (queue name for BullMQ) to use instead of the system's bench default. */
  schema?: string;
}

/** What the store holds: finished jobs (null where the system deletes them) and unfinished ones. */
export interface StoreCounts {
  completed: number | null;
  remaining: number;
}

export interface RunningWorker {
  /** Graceful stop; resolves when the worker has let go of everything. */
  stop(): Promise<void>;
}

export interface Peer {
  readonly system: System;
  readonly label: string;
  /** Schema (or queue name) the system keeps its jobs in. */
  readonly schema: string;
  /** The worker settings of each mode, as passed to the system (for the results file). */
  readonly settings: Record<Mode, unknown>;
  /** The same, in a few words for the printed table. */
  readonly describe: Record<Mode, string>;
  /**
   * A cap on a drain for a mode that is hopelessly slow (pg-boss defaults poll every 2 s,
   * one job per fetch): drain at most `jobs` or for `ms`, and rate what completed.
   */
  readonly drainCap?: Partial<Record<Mode, { jobs: number; ms: number }>>;
  /** Drops the system's storage and creates it anew. */
  setup(): Promise<void>;
  /** Drops the system's storage. */
  teardown(): Promise<void>;
  /** Adds jobs with the system's bulk API, in one call. */
  bulkEnqueue(payloads: Payload[]): Promise<void>;
  /** Adds one job with the system's single-job API. */
  enqueueOne(payload: Payload): Promise<void>;
  /** VACUUM ANALYZE of the system's job tables (nothing for Redis). */
  vacuum(): Promise<void>;
  counts(): Promise<StoreCounts>;
  /**
   * A number that grows by one per finished job, for the worker's own check at the end of
   * a drain (so it should be cheap); it may count from the first call.
   */
  progress(): Promise<number>;
  /** Starts a worker of the given mode whose no-op handler calls `onJob` as each job starts. */
  startWorker(mode: Mode, onJob: (payload: Payload) => void): Promise<RunningWorker>;
  /** Closes the producer-side clients. */
  close(): Promise<void>;
}

/** A system that cannot run here (a missing optional package); the suite skips its row. */
export class PeerUnavailable extends Error {}

/** `count(*)` of a query, as a number. */
export async function count(pool: pg.Pool, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${sql}`, params);
  return Number(rows[0]?.n ?? 0);
}
