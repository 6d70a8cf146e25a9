// An idle worker waits on the database's clock, not its own: with its clock 5 s
// ahead, it sends no more queries than with the clocks in step.
import pg from 'pg';
import { afterEach, expect, it, vi } from 'vitest';
import { sleep, useTestDb } from '../helpers.js';

const db = useTestDb(import.meta.url);
afterEach(() => {
  vi.restoreAllMocks();
});

/** A pool that counts the statements sent on its connections (pool.query included). */
function countingPool() {
  const pool = new pg.Pool({ connectionString: db.url, max: 4 });
  const counter = { queries: 0, pool };
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((...args: unknown[]) => {
      counter.queries++;
      return query(...args);
    }) as typeof client.query;
  });
  return counter;
}

async function countFor(counter: { queries: number }, ms: number): Promise<number> {
  const before = counter.queries;
  await sleep(ms);
  return counter.queries - before;
}

it('an idle worker whose clock is 5 s ahead of the database does not spin while a job is due in 7 s', async () => {
  const counter = countingPool();
  const tusk = db.another({ pool: counter.pool });
  await db.tusk.enqueue('later', null, { queue: 'skew', delayMs: 7000 });
  const worker = db.worker(
    { queues: ['skew'], heartbeatMs: 1000, pollMs: 1000, maintenanceMs: 500, tasks: { later: () => null } },
    tusk,
  );
  const realNow = Date.now.bind(Date);
  try {
    await worker.start();
    await sleep(500);
    const inStep = await countFor(counter, 1500);
    // from now on the worker's clock reads 5 s ahead: the job looks due 2 s ago
    vi.spyOn(Date, 'now').mockImplementation(() => realNow() + 5000);
    await sleep(1000); // its next look at the due time
    const ahead = await countFor(counter, 1500);
    console.log(
      `queries of an idle worker in 1.5 s: ${inStep} with the clocks in step, ${ahead} with its clock 5 s ahead`,
    );
    expect(inStep, 'queries in 1.5 s, clocks in step').toBeLessThan(60);
    expect(ahead, 'queries in 1.5 s, the worker’s clock 5 s ahead').toBeLessThan(60);
  } finally {
    vi.restoreAllMocks();
    await worker.stop();
    await tusk.close();
    await counter.pool.end();
  }
});

it('an idle worker with nothing scheduled does not spin', async () => {
  const counter = countingPool();
  const tusk = db.another({ pool: counter.pool });
  const worker = db.worker(
    { queues: ['nothing'], heartbeatMs: 1000, pollMs: 1000, maintenanceMs: 500, tasks: { x: () => null } },
    tusk,
  );
  try {
    await worker.start();
    await sleep(500);
    const idle = await countFor(counter, 1500);
    console.log(`queries of an idle worker with nothing due in 1.5 s: ${idle}`);
    expect(idle, 'queries in 1.5 s').toBeLessThan(60);
  } finally {
    await worker.stop();
    await tusk.close();
    await counter.pool.end();
  }
});
