// GET /api/events: each job that finishes, as Server-Sent Events, a tenant's token seeing its own.
import { describe, expect, it } from 'vitest';
import { useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

/** Reads `finished` events from an event stream until `count` arrived. */
async function finishedEvents(res: Response, count: number, ready: () => Promise<void>) {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  const events: Array<Record<string, unknown>> = [];
  let text = '';
  let isReady = false;
  while (events.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event === 'ready' && !isReady) {
        isReady = true;
        await ready();
      }
      if (event === 'finished' && data) events.push(JSON.parse(data));
    }
  }
  await reader.cancel();
  return events;
}

describe('GET /api/events', () => {
  it('streams each job that finishes; a tenant token sees its tenant’s only', async () => {
    const server = await db.tusk.server({ adminToken: `admin-${'x'.repeat(40)}` });
    const acme = (await server.tokens.create({ tenant: 'acme' })).token;
    const listening = await server.listen({ port: 0 });
    try {
      const open = (token: string) =>
        fetch(`${listening.url}/api/events`, { headers: { authorization: `Bearer ${token}` } });
      const [mine, all] = await Promise.all([open(acme), open(`admin-${'x'.repeat(40)}`)]);
      expect(mine.headers.get('content-type')).toMatch(/text\/event-stream/);
      let finishing: Promise<void> | null = null;
      const finishBoth = () => {
        finishing ??= (async () => {
          const a = await db.tusk.enqueue('t', null, { tenant: 'acme', queue: 'ev' });
          const g = await db.tusk.enqueue('t', null, { tenant: 'globex', queue: 'ev' });
          await db.tusk.cancel(g.id);
          const [lease] = await db.tusk.fetch({ queue: 'ev', tenant: 'acme' });
          await db.tusk.ack(lease as never, 'ok');
          expect(lease?.id).toBe(a.id);
        })();
        return finishing;
      };
      let readyCount = 0;
      const bothReady = async () => {
        if (++readyCount === 2) await finishBoth();
      };
      const [mineEvents, allEvents] = await Promise.all([
        finishedEvents(mine, 1, bothReady),
        finishedEvents(all, 2, bothReady),
      ]);
      expect(mineEvents.map((e) => [e.tenant, e.state])).toEqual([['acme', 'succeeded']]);
      expect(allEvents.map((e) => [e.tenant, e.state]).sort()).toEqual([
        ['acme', 'succeeded'],
        ['globex', 'cancelled'],
      ]);
    } finally {
      await listening.close();
    }
  });
});
