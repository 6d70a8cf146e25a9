// A worker cut off from PostgreSQL stops its handlers before its lease can run
// out on the server, so that a tenant's slots hold in the world, not only in the database.
import { expect, it } from 'vitest';
import { eventually, sleep, useTestDb } from '../helpers.js';
import { settledStates } from './common.js';
import { startUpkeep } from './hooks.js';
import { PgProxy } from './proxy.js';
import { describeSpans, overlaps, Spans } from './spans.js';

const db = useTestDb(import.meta.url);

it('a worker cut off for 3 s (lease 1.5 s): two handlers of a slots: 1 tenant never run at once', async () => {
  await db.tusk.tenants.set('solo', { slots: 1 });
  const proxy = new PgProxy(db.url);
  await proxy.start();
  const spans = new Spans();
  const options = { queues: ['cut'], leaseMs: 1500, heartbeatMs: 300, pollMs: 100 };
  const remote = db.another({ connectionString: proxy.url });
  const cutOff = db.worker({ ...options, tasks: { span: spans.handler('the cut-off worker') } }, remote);
  const other = db.worker({ ...options, tasks: { span: spans.handler('the other worker') } });
  try {
    await cutOff.start();
    const { ids } = await db.tusk.enqueueMany([
      { task: 'span', payload: { ms: 4000 }, queue: 'cut', tenant: 'solo' },
      { task: 'span', payload: { ms: 4000 }, queue: 'cut', tenant: 'solo' },
    ]);
    await eventually(() => spans.all.length > 0);
    await other.start(); // no slot free: it waits
    const upkeep = await startUpkeep(db);
    try {
      proxy.cut();
      await sleep(3000);
      proxy.heal();
      await settledStates(db, ids, 20_000);
    } finally {
      await upkeep.stop();
    }
    expect(
      {
        atOnce: overlaps(spans.all, (s) => s.tenant).length,
        otherRanOne: spans.all.some((s) => s.who === 'the other worker'),
        states: (await settledStates(db, ids, 0)).join(),
      },
      describeSpans(spans.all),
    ).toEqual({ atOnce: 0, otherRanOne: true, states: 'succeeded,succeeded' });
  } finally {
    proxy.heal();
    await Promise.all([cutOff.stop(), other.stop()]);
    await remote.close();
    await proxy.close();
  }
});
