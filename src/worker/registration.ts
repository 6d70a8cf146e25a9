import { hostname } from 'node:os';
import type pg from 'pg';
import type { Queryable } from '../db/queryable.js';
import { isConnectionError } from '../errors.js';
import type { Logger } from '../log.js';
import { recordDefinitions } from '../queries/taskDefinitions.js';
import { registerWorker, unregisterWorker, type WorkerRegistration } from '../queries/workers.js';
import { definitionRows } from '../tasks/recorded.js';
import { VERSION } from '../version.js';
import { DEFAULT_TIMEOUT_MS, queueNames, type ResolvedWorkerOptions } from './options.js';

/**
 * The worker's row in the workers table. It is held by the listening connection (the
 * row's session lock): while that connection is down the worker looks dead to the upkeep
 * of other processes, so when it was lost and how often it came back are kept here too.
 */
export class Registration {
  readonly #schema: string;
  readonly #log: Logger;
  /** What is registered, built once: the worker's name, host, queues, concurrency. */
  readonly #info: Omit<WorkerRegistration, 'id'>;
  #id: number | null = null;
  #disconnectedAt = Number.NEGATIVE_INFINITY;
  #reconnects = 0;

  constructor(schema: string, log: Logger, options: ResolvedWorkerOptions) {
    this.#schema = schema;
    this.#log = log;
    this.#info = {
      name: options.name ?? `${hostname()}:${process.pid}`,
      host: hostname(),
      pid: process.pid,
      queues: queueNames(options.queues),
      concurrency: options.concurrency,
      version: VERSION,
    };
  }

  /** The worker's id in the workers table (null before it first registers). */
  get id(): number | null {
    return this.#id;
  }

  /** When the listening connection was last lost (performance.now()). */
  get disconnectedAt(): number {
    return this.#disconnectedAt;
  }

  /** Times the listening connection came back while the worker ran: a failure before the last one is stale. */
  get reconnects(): number {
    return this.#reconnects;
  }

  disconnected(): void {
    this.#disconnectedAt = performance.now();
  }

  reconnected(): void {
    this.#reconnects++;
  }

  /** Registers (or re-registers, keeping its id) the worker on its listening connection. */
  async register(client: pg.Client): Promise<void> {
    this.#id = await registerWorker(client, this.#schema, { ...this.#info, id: this.#id });
  }

  /** Removes the worker's row, if it has one; a failure is logged (the upkeep reaps the row). */
  async unregister(db: Queryable): Promise<void> {
    if (this.#id === null) return;
    await unregisterWorker(db, this.#schema, this.#id).catch((error) =>
      this.#log.warn({ err: error }, 'could not unregister the worker'),
    );
  }

  /**
   * Records the definitions of `tasks` for producers that do not load the task list. A
   * refusal (a role without the privilege) is logged and the worker runs on; a lost
   * connection fails the start like any other.
   */
  async recordDefinitions(pool: pg.Pool, tasks: ResolvedWorkerOptions['tasks']): Promise<void> {
    try {
      await recordDefinitions(pool, this.#schema, definitionRows(tasks, this.#info.name, DEFAULT_TIMEOUT_MS));
    } catch (error) {
      if (isConnectionError(error)) throw error;
      this.#log.warn({ err: error }, 'the task definitions could not be recorded for producers');
    }
  }
}
