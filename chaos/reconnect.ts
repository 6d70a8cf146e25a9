// The chaos run's restart check: when the restarted server accepted connections (its own
// log says), and when each worker was back at work after it — registered again on its
// listening connection, and claiming — all by the server's clock.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type pg from 'pg';
import type { EmbeddedServer } from '../src/db/embedded.js';
import { slotName, type WorkerProcess } from './fleet.js';

type Query = (sql: string, values?: unknown[]) => Promise<pg.QueryResult>;

/** After the restart, how long the run watches the workers come back (no kills meanwhile). */
export const RECONNECT_WATCH_MS = 8000;
/** Every worker must be registered and claiming this soon after the server accepts connections. */
export const RECONNECT_GOAL_MS = 2000;

/** A worker's return after the restart, in ms after the server accepted connections. */
export interface Return {
  worker: WorkerProcess;
  /** Its listening connection registered it again. */
  registeredMs: number | null;
  /** A claim of its came back (with jobs or not: its peers may hold every slot). */
  claimedMs: number | null;
  /** The claim of the first job it ran after the restart. */
  firstJobMs: number | null;
}

interface Seen {
  /** When the listening connection's register_worker ended. */
  registered: number | null;
  /** The earliest claim_jobs seen ended since `since` (a connection's last statement). */
  claimed: number | null;
}

/**
 * Per slot, what its connections' last statements say (ms since the epoch, server clock):
 * idle ones whose last statement registered the worker, or claimed jobs.
 */
async function activity(q: Query, since: number): Promise<Map<string, Seen>> {
  const { rows } = await q(
    `SELECT application_name AS name,
       (extract(epoch FROM max(state_change) FILTER (WHERE query LIKE '%register_worker%')) * 1000)::float8
         AS registered,
       (extract(epoch FROM min(state_change) FILTER (WHERE query LIKE '%claim_jobs%'
         AND state_change >= to_timestamp($1::float8 / 1000))) * 1000)::float8 AS claimed
     FROM pg_stat_activity
     WHERE application_name LIKE 'chaos-w%' AND state = 'idle'
     GROUP BY 1`,
    [since],
  );
  return new Map(rows.map((r: Seen & { name: string }) => [r.name, r]));
}

/** Whether every worker is registered: the restart waits for it, to time returns and not start-ups. */
export async function allRegistered(q: Query, workers: WorkerProcess[]): Promise<boolean> {
  const seen = await activity(q, Date.now()).catch(() => new Map<string, Seen>());
  return workers.every((w) => (seen.get(slotName(w.slot))?.registered ?? null) !== null);
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

/** Per worker process, the claim time of the first job it ran since `upAt` (ms since the epoch). */
async function firstJobs(q: Query, upAt: number): Promise<Map<number, number>> {
  const { rows } = await q(
    `SELECT pid, (extract(epoch FROM min(claimed_at)) * 1000)::float8 AS at FROM $schema.chaos_executions
     WHERE claimed_at >= to_timestamp($1::float8 / 1000) GROUP BY pid`,
    [upAt],
  );
  return new Map(rows.map((r: { pid: number; at: number }) => [r.pid, r.at]));
}

/**
 * Polls until every worker is registered, has had a claim answered and has run a job, or
 * RECONNECT_WATCH_MS after `upAt`. A claim is seen as its connection's last statement: one
 * followed by another within a poll is missed, so a claim time can only come out late.
 */
export async function watchReturns(q: Query, workers: WorkerProcess[], upAt: number): Promise<Return[]> {
  const returns = workers.map((worker): Return => ({ worker, registeredMs: null, claimedMs: null, firstJobMs: null }));
  const after = (at: number | null | undefined) => (at === null || at === undefined || at < upAt ? null : at - upAt);
  const pending = () => returns.some((r) => r.registeredMs === null || r.claimedMs === null || r.firstJobMs === null);
  while (Date.now() < upAt + RECONNECT_WATCH_MS && pending()) {
    const [seen, jobs] = await Promise.all([activity(q, upAt), firstJobs(q, upAt)]).catch(
      () => [new Map<string, Seen>(), new Map<number, number>()] as const,
    );
    for (const r of returns) {
      const s = seen.get(slotName(r.worker.slot));
      r.registeredMs ??= after(s?.registered);
      const claimed = after(s?.claimed);
      if (claimed !== null && (r.claimedMs === null || claimed < r.claimedMs)) r.claimedMs = claimed;
      r.firstJobMs ??= after(jobs.get(r.worker.pid));
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  // a job's claim was a claim answered, and may have been missed by the polls
  for (const r of returns) {
    if (r.firstJobMs !== null && (r.claimedMs === null || r.firstJobMs < r.claimedMs)) r.claimedMs = r.firstJobMs;
  }
  return returns;
}

/**
 * The check's rows, one per worker that lived through the watch: registered, claim
 * answered and first job, in ms; registered and claiming within RECONNECT_GOAL_MS.
 */
export function returnChecks(returns: Return[], restartAt: number): Array<[string, string, string, boolean]> {
  const through = returns.filter(({ worker: w }) => w.exitedAt === null || w.exitedAt > restartAt + RECONNECT_WATCH_MS);
  through.sort((a, b) => a.worker.slot - b.worker.slot);
  return through.map(({ worker, registeredMs, claimedMs, firstJobMs }) => {
    const ms = (v: number | null) => (v === null ? 'never' : String(Math.round(v)));
    const ok = registeredMs !== null && claimedMs !== null && Math.max(registeredMs, claimedMs) <= RECONNECT_GOAL_MS;
    return [
      `${slotName(worker.slot)} back after the restart, ms (registered / claiming / first job)`,
      `${ms(registeredMs)} / ${ms(claimedMs)} / ${ms(firstJobMs)}`,
      `≤ ${RECONNECT_GOAL_MS} / ≤ ${RECONNECT_GOAL_MS}`,
      ok,
    ];
  });
}
