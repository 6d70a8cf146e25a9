import { expect } from 'vitest';
import type { Sink } from '../src/index.js';
import { eventually, sleep, type TestDb } from './helpers.js';

/** One call of a sink's send: who made it, and when it started and ended (ms, this process's clock). */
export interface Send {
  who: string;
  start: number;
  end: number | null;
  ids: string[];
}

const now = () => performance.now();

/** Sends that ran at the same time (a send still running counts as running forever). */
export function sideBySide(sends: readonly Send[]): Array<[Send, Send]> {
  const sorted = [...sends].sort((a, b) => a.start - b.start);
  const found: Array<[Send, Send]> = [];
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length; j++) {
      const [a, b] = [sorted[i] as Send, sorted[j] as Send];
      if (b.start < (a.end ?? Number.POSITIVE_INFINITY)) found.push([a, b]);
    }
  }
  return found;
}

/** The session holding the drain lock is terminated, as when the server drops the connection. */
export async function terminateDrainLock(db: TestDb): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(pg_terminate_backend(l.pid))::int AS n FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.classid = hashtext($1)::oid AND l.objid = 0`,
    [`${db.schema}:drain`],
  );
  return rows[0]?.n ?? 0;
}

/**
 * One drainer is in the middle of a send (the sink's first, `sendMs` long; later ones take
 * 100 ms; the sink deaf to the signal, or stopping on it) when its lock connection is
 * terminated; another stands by. Checks that no two sends ever run at once, whoever makes
 * them, and that every staged job arrives.
 */
export async function lostMidSend(
  db: TestDb,
  trial: number,
  o: { sendMs: number; sendTimeoutMs: number; honorsSignal: boolean },
): Promise<void> {
  const sends: Send[] = [];
  const sink = (who: string): Sink => ({
    name: `slow ${who}`,
    async send(jobs, { signal }) {
      const send: Send = { who, start: now(), end: null, ids: jobs.map((j) => j.id) };
      sends.push(send);
      try {
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(resolve, sends.length === 1 ? o.sendMs : 100);
          if (o.honorsSignal) {
            signal.addEventListener(
              'abort',
              () => {
                clearTimeout(timer);
                reject(signal.reason);
              },
              { once: true },
            );
          }
        });
      } finally {
        send.end = now();
      }
    },
  });
  const options = { standbyPollMs: 20, pollMs: 50, sendTimeoutMs: o.sendTimeoutMs };
  const [one, two] = [db.another(), db.another()];
  const first = one.drainer({ sink: sink('first'), ...options });
  const second = two.drainer({ sink: sink('second'), ...options });
  try {
    await first.start();
    await eventually(() => first.state === 'active');
    await second.start();
    const { ids } = await db.tusk.stageMany(
      await db.tusk.pool(),
      Array.from({ length: 5 }, (_, n) => ({ task: 'race', payload: { trial, n } })),
    );
    await eventually(() => sends.length > 0);
    // a random moment mid-send, the interleaving under test (a stall past the send's end makes an easier trial)
    await sleep(Math.random() * Math.min(o.sendMs, o.sendTimeoutMs) * 0.8);
    expect(await terminateDrainLock(db)).toBe(1);
    await eventually(async () => (await db.tusk.stagedCount()) === 0, 20_000);
    const delivered = new Set(sends.flatMap((s) => s.ids));
    const t0 = sends[0]?.start ?? 0;
    const timeline = sends
      .map((s) => `${s.who}: ${Math.round(s.start - t0)}..${s.end === null ? 'running' : Math.round(s.end - t0)} ms`)
      .join(', ');
    expect(
      { sideBySide: sideBySide(sends).length, missing: ids.filter((id) => !delivered.has(id)) },
      `trial ${trial}: ${timeline}`,
    ).toEqual({ sideBySide: 0, missing: [] });
  } finally {
    await Promise.all([first.stop(), second.stop()]);
    await Promise.all([one.close(), two.close()]);
  }
}
