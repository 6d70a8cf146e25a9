import type { Queryable } from '../db/queryable.js';
import { pausedQueues, pauseQueue } from '../queries/queues.js';
import { nameSchema, parse } from '../validation/validate.js';

const queueName = nameSchema(128);

/**
 * Pausing queues: after `pause()` returns, no claim takes a job of the queue (running jobs
 * go on, enqueues still land in it) until `resume()`. For every worker and consumer at once.
 *
 * @example
 * await tusk.queues.pause('emails');   // the mail provider is down
 * await tusk.queues.resume('emails');
 */
export class Queues {
  readonly #db: () => Promise<Queryable>;
  readonly #schema: string;

  constructor(db: () => Promise<Queryable>, schema: string) {
    this.#db = db;
    this.#schema = schema;
  }

  /** Stops claims of the queue's jobs. False if it was paused already. */
  async pause(queue: string): Promise<boolean> {
    return pauseQueue(await this.#db(), this.#schema, parse(queueName, queue, 'queue'), true);
  }

  /** Claims its jobs again. False if it was not paused. */
  async resume(queue: string): Promise<boolean> {
    return pauseQueue(await this.#db(), this.#schema, parse(queueName, queue, 'queue'), false);
  }

  /** The paused queues, oldest name first. */
  async paused(): Promise<Array<{ queue: string; pausedAt: Date }>> {
    return pausedQueues(await this.#db(), this.#schema);
  }
}
