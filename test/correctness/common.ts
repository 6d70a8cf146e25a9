import type { JobState } from '../../src/index.js';
import { sleep, type TestDb } from '../helpers.js';

/** A job's state; if `getJob` fails, its error (so that an assertion message shows it). */
export async function stateOf(db: TestDb, id: string): Promise<JobState | string | null> {
  try {
    return (await db.tusk.getJob(id))?.state ?? null;
  } catch (error) {
    return `getJob failed: ${(error as Error).message}`;
  }
}

const finished = (s: string | null) => ['succeeded', 'dead', 'cancelled', 'expired'].includes(s as JobState);

/**
 * The states of `ids` once every one is finished, or as they are after `ms`: a test then
 * asserts the states, so that a job stuck in `running` shows as such in its message.
 */
export async function settledStates(db: TestDb, ids: readonly string[], ms = 5000): Promise<Array<string | null>> {
  const deadline = Date.now() + ms;
  for (;;) {
    const states = await Promise.all(ids.map((id) => stateOf(db, id)));
    if (states.every(finished) || Date.now() > deadline) return states;
    await sleep(25);
  }
}

/** The states of `ids` once none is in `from` (or as they are after `ms`). */
export async function statesAfter(db: TestDb, ids: readonly string[], from: JobState[], ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const states = await Promise.all(ids.map((id) => stateOf(db, id)));
    if (states.every((s) => !from.includes(s as JobState)) || Date.now() > deadline) return states;
    await sleep(25);
  }
}

/** The state of `id` once it has left `from` (or as it is after `ms`). */
export async function stateAfter(db: TestDb, id: string, from: JobState[], ms = 5000) {
  return (await statesAfter(db, [id], from, ms))[0];
}

export const daysAgo = (days: number) => new Date(Date.now() - days * 24 * 3600_000);
