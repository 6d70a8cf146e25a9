// The chaos run's restart check: when the restarted server accepted connections (its own
// log says), and when each worker was back at work after it — registered again on its
// listening connection and claiming jobs — all by the server's clock.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type pg from 'pg';
import type { EmbeddedServer } from '../src/db/embedded.js';
import { slotName, type WorkerProcess } from './fleet.js';

type Query = (sql: string, values?: unknown[]) => Promise<pg.QueryResult>;

/** After the restart, how long the run watches the workers come back (no kills meanwhile). */
export const RECONNECT_WATCH_MS = 8000;
/** Every worker must be back at work this soon after the server accepts connections. */
export const RECONNECT_GOAL_MS = 2000;

/** A worker's return after the restart, in ms after the server accepted connections. */
export interface Return {
  worker: WorkerProcess;
  /** Its listening connection registered it again. */
  registeredMs: number | null;
  /** The first claim it made after the restart (of a job whose handler then ran). */
  claimedMs: number | null;
}

/**
 * The slots whose listening connection has registered its worker (its last statement),
 * with when that statement ended (ms since the epoch, server clock).
 */
async function registrations(q: Query): Promise<Map<string, number>> {
  const { rows } = await q(
    `SELECT application_name AS name, (extract(epoch FROM max(state_change)) * 1000)::float8 AS at
     FROM pg_stat_activity
     WHERE application_name LIKE 'chaos-w%' AND query LIKE '%register_worker%' AND state = 'idle'
     GROUP BY 1`,
  );
  return new Map(rows.map((r: { name: string; at: number }) => [r.name, r.at]));
}

/** Whether every worker is registered: the restart waits for it, to time returns and not start-ups. */
export async function allRegistered(q: Query, workers: WorkerProcess[]): Promise<boolean> {
  const seen = await registrations(q).catch(() => new Map<string, number>());
  return workers.every((w) => seen.has(slotName(w.slot)));
}

/**
 * When the restarted server accepted connections (ms since the epoch, server clock): its
 * log's last "ready" line if it came after `since`, else now (pg_ctl -w has returned).
 */
export async function acceptedAt(server: EmbeddedServer, q: Query, since: number): Promise<number> {
  const log = await readFile(join(server.dataDir, 'tusk-server.log'), 'utf8').catch(() => '');
  const ready = [...log.matchAll(/^(.+?) \[\d+\] LOG: {2}database system is ready to accept connections$/gm)].at(-1);
  const { rows } = await q(
    `SELECT (extract(epoch FROM $1::timestamptz) * 1000)::float8 AS ready,
            (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now`,
    [ready?.[1] ?? null],
  );
  const { ready: at, now } = rows[0] as { ready: number | null; now: number };
  return at !== null && at >= since ? at : now;
}

/** Per worker process, its first claim since `upAt` whose handler ran (ms since the epoch). */
async function firstClaims(q: Query, upAt: number): Promise<Map<number, number>> {
  const { rows } = await q(
    `SELECT pid, (extract(epoch FROM min(claimed_at)) * 1000)::float8 AS at FROM $schema.chaos_executions
     WHERE claimed_at >= to_timestamp($1::float8 / 1000) GROUP BY pid`,
    [upAt],
  );
  return new Map(rows.map((r: { pid: number; at: number }) => [r.pid, r.at]));
}

/** Polls until every worker is back at work, or RECONNECT_WATCH_MS after `upAt`. */
export async function watchReturns(q: Query, workers: WorkerProcess[], upAt: number): Promise<Return[]> {
  const returns = workers.map((worker): Return => ({ worker, registeredMs: null, claimedMs: null }));
  const pending = () => returns.some((r) => r.registeredMs === null || r.claimedMs === null);
  while (Date.now() < upAt + RECONNECT_WATCH_MS && pending()) {
    const [registered, claimed] = await Promise.all([registrations(q), firstClaims(q, upAt)]).catch(
      () => [new Map<string, number>(), new Map<number, number>()] as const,
    );
    for (const r of returns) {
      const at = registered.get(slotName(r.worker.slot));
      if (r.registeredMs === null && at !== undefined && at >= upAt) r.registeredMs = at - upAt;
      const claim = claimed.get(r.worker.pid);
      if (r.claimedMs === null && claim !== undefined) r.claimedMs = claim - upAt;
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return returns;
}

/** The check's rows, one per worker that lived through the watch: registered / claimed, ms. */
export function returnChecks(returns: Return[], restartAt: number): Array<[string, string, string, boolean]> {
  const through = returns.filter(({ worker: w }) => w.exitedAt === null || w.exitedAt > restartAt + RECONNECT_WATCH_MS);
  through.sort((a, b) => a.worker.slot - b.worker.slot);
  return through.map(({ worker, registeredMs, claimedMs }) => {
    const ms = (v: number | null) => (v === null ? 'never' : String(Math.round(v)));
    const ok = registeredMs !== null && claimedMs !== null && Math.max(registeredMs, claimedMs) <= RECONNECT_GOAL_MS;
    return [
      `back at work after the restart: ${slotName(worker.slot)} (registered / claimed, ms after the server accepted)`,
      `${ms(registeredMs)} / ${ms(claimedMs)}`,
      `≤ ${RECONNECT_GOAL_MS}`,
      ok,
    ];
  });
}
