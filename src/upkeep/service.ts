import type { Database } from '../db/connection.js';
import type { Logger } from '../log.js';

/**
 * One kind of upkeep work, done by one process at a time (each takes its own advisory lock
 * in the database): `runOnce` does a pass, or returns null when another process is doing it.
 */
export interface UpkeepService<R> {
  /** Its name in logs and events: 'queue', 'schedules', 'history'. */
  readonly name: string;
  /** How often the upkeep runs it. */
  readonly everyMs: number;
  runOnce(db: Database): Promise<R | null>;
}

/** What every service is given. */
export interface ServiceContext {
  schema: string;
  log: Logger;
}
