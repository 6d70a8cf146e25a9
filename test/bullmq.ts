import { randomBytes } from 'node:crypto';
import { type ConnectionOptions, Queue } from 'bullmq';
import { Redis } from 'ioredis';

import { REDIS_URL } from './services.js';

export { REDIS_URL };

export interface BullJob {
  id: string;
  name: string;
  data: unknown;
  opts: { delay?: number; attempts?: number; priority?: number };
}

/** A BullMQ queue with a name of its own, read back by tests and removed by close(). */
export function testQueue(label: string) {
  const name = `tusk-test-${label}-${randomBytes(3).toString('hex')}`;
  const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue(name, { connection: connection as unknown as ConnectionOptions });
  return {
    name,
    /** Every job not yet processed, oldest first. */
    async jobs(): Promise<BullJob[]> {
      const jobs = await queue.getJobs(['waiting', 'delayed', 'prioritized'], 0, -1, true);
      return jobs.map((j) => ({ id: String(j.id), name: j.name, data: j.data, opts: j.opts }));
    },
    async close() {
      await queue.obliterate({ force: true });
      await queue.close();
      await connection.quit();
    },
  };
}
