// GET /api/events: each job that finishes and each running job's progress, as Server-Sent
// Events, a tenant's token seeing its own.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { createServer } from '../src/index.js';
import { eventually, sleep, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);

/** Reads `kind` events from an event stream until `count` arrived. */
async function readEvents(res: Response, kind: string, count: number, ready: () => Promise<void>) {
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
      if (event === kind && data) events.push(JSON.parse(data));
    }
  }
  await reader.cancel();
  return events;
}

describe('GET /api/events', () => {
  it('streams each job that finishes; a tenant token sees its tenant’s only', async () => {
    const server = await createServer(db.tusk, { adminToken: `admin-${'x'.repeat(40)}` });
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
        readEvents(mine, 'finished', 1, bothReady),
        readEvents(all, 'finished', 2, bothReady),
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

  it('streams the progress workers write of running jobs; a tenant token sees its tenant’s only', async () => {
    const admin = `admin-${'y'.repeat(40)}`;
    const server = await createServer(db.tusk, { adminToken: admin });
    const acme = (await server.tokens.create({ tenant: 'acme' })).token;
    const listening = await server.listen({ port: 0 });
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const worker = db.worker({
      queues: ['ev-progress'],
      heartbeatMs: 50,
      tasks: {
        report: async (payload: { tenant: string }, ctx) => {
          ctx.progress({ tenant: payload.tenant, done: 1 });
          await released;
        },
      },
    });
    try {
      const open = (token: string) =>
        fetch(`${listening.url}/api/events`, { headers: { authorization: `Bearer ${token}` } });
      const [mine, all] = await Promise.all([open(acme), open(admin)]);
      let readyCount = 0;
      const bothReady = async () => {
        if (++readyCount < 2) return;
        await worker.start();
        for (const tenant of ['acme', 'globex']) {
          await db.tusk.enqueue('report', { tenant }, { tenant, queue: 'ev-progress' });
        }
      };
      const [mineEvents, allEvents] = await Promise.all([
        readEvents(mine, 'progress', 1, bothReady),
        readEvents(all, 'progress', 2, bothReady),
      ]);
      expect(mineEvents).toMatchObject([{ tenant: 'acme', task: 'report', progress: { tenant: 'acme', done: 1 } }]);
      expect(
        allEvents.map((e) => e.progress).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
      ).toEqual([
        { tenant: 'acme', done: 1 },
        { tenant: 'globex', done: 1 },
      ]);
    } finally {
      release();
      await worker.stop();
      await listening.close();
    }
  });
  it("one tenant's many streams cost one read per batch of events, not one each; past 16 streams a token is refused (429)", async () => {
    const admin = `admin-${'z'.repeat(40)}`;
    const server = await createServer(db.tusk, { adminToken: admin });
    const acme = (await server.tokens.create({ tenant: 'acme' })).token;
    const listening = await server.listen({ port: 0 });
    const open = (token: string) =>
      fetch(`${listening.url}/api/events`, { headers: { authorization: `Bearer ${token}` } });
    const streams: Response[] = [];
    const locker = await db.pool.connect();
    try {
      for (let i = 0; i < 16; i++) streams.push(await open(acme));
      // before, a token could open streams without end
      const over = await open(acme);
      expect(over.status).toBe(429);
      expect(((await over.json()) as { error: { code: string } }).error.code).toBe('too_many_streams');
      expect(over.headers.get('retry-after')).toBe('1');
      // the admin is not counted (an app behind its own auth serves all its users with it)
      for (let i = 0; i < 17; i++) {
        const mine = await open(admin);
        expect(mine.status).toBe(200);
        streams.push(mine);
      }
      // another tenant's job ends while the history cannot be read: the reads of its event wait
      const { id } = await db.tusk.enqueue('t', null, { tenant: 'globex', queue: 'ev-many' });
      await db.tusk.cancel(id);
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".job_history IN ACCESS EXCLUSIVE MODE`);
      await db.pool.query('SELECT pg_notify($1, $2)', [`${db.schema}:done`, id]);
      const reads = async () =>
        (
          await db.rows<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE application_name = 'tusk http reads' AND wait_event_type = 'Lock' AND query LIKE '%job_history%'`,
          )
        )[0]?.n ?? 0;
      await eventually(async () => (await reads()) > 0);
      await sleep(300);
      // before, one read per stream (as many as the reads pool has connections, the rest queued)
      expect(await reads()).toBe(1);
      await locker.query('COMMIT');
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      for (const s of streams) await s.body?.cancel();
      await listening.close();
    }
  });
  it('a stream whose client stops reading ends at 1 000 unsent batches: its slot, its rows and its connection are let go', async () => {
    const admin = `admin-${'w'.repeat(40)}`;
    const server = await createServer(db.tusk, { adminToken: admin });
    const acme = (await server.tokens.create({ tenant: 'acme' })).token;
    const listening = await server.listen({ port: 0 });
    const { port } = new URL(listening.url);
    const ids: string[] = [];
    for (let i = 0; i < 100; i++) {
      const { id } = await db.tusk.enqueue('t'.repeat(150), null, { tenant: 'acme', queue: 'q'.repeat(120) });
      await db.tusk.cancel(id);
      ids.push(id);
    }
    // a client that reads up to the ready event, then nothing
    const socket = net.connect(Number(port), '127.0.0.1');
    try {
      await new Promise<void>((resolve) => {
        let got = '';
        socket.on('data', (d) => {
          got += String(d);
          if (got.includes('event: ready')) {
            socket.pause();
            resolve();
          }
        });
        socket.write(`GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${acme}\r\n\r\n`);
      });
      // half again the bound: the batches the kernel's buffers take do not count as unsent
      for (let b = 0; b < 1500; b++)
        await db.pool.query('SELECT pg_notify($1, $2)', [`${db.schema}:done`, ids.join(',')]);
      // before, the stream waited on its client for good, holding its slot (and its batches)
      const opened: Response[] = [];
      try {
        await eventually(
          async () => {
            const r = await fetch(`${listening.url}/api/events`, { headers: { authorization: `Bearer ${acme}` } });
            if (r.status === 200) opened.push(r);
            else await r.body?.cancel();
            return opened.length === 16;
          },
          30_000,
          100,
          '16 streams of the token open beside the one that stopped reading',
        );
      } finally {
        for (const r of opened) await r.body?.cancel();
      }
      // and its connection is closed, the write it waited on with it (before, open until the
      // client read or left). The client still reads nothing: it sends a request now and
      // then, which a closed connection answers with a reset
      socket.on('error', () => {});
      const closed = new Promise<string>((resolve) => socket.once('close', () => resolve('closed')));
      const probe = setInterval(() => socket.write('GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'), 200);
      try {
        // a deadline, not a wait: the race ends at the close
        expect(await Promise.race([closed, sleep(10_000).then(() => 'still open')])).toBe('closed');
      } finally {
        clearInterval(probe);
      }
    } finally {
      socket.destroy();
      await listening.close();
    }
  });

  it('a batch that cannot be read ends the streams (their clients know to look again), not skipped unsaid', async () => {
    const admin = `admin-${'v'.repeat(40)}`;
    const server = await createServer(db.tusk, { adminToken: admin, readTimeoutMs: 300 });
    const listening = await server.listen({ port: 0 });
    const locker = await db.pool.connect();
    try {
      const { id } = await db.tusk.enqueue('t', null, { queue: 'ev-unread' });
      await db.tusk.cancel(id);
      const res = await fetch(`${listening.url}/api/events`, { headers: { authorization: `Bearer ${admin}` } });
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toMatch(/event: ready/);
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${db.schema}".job_history IN ACCESS EXCLUSIVE MODE`);
      await db.pool.query('SELECT pg_notify($1, $2)', [`${db.schema}:done`, id]);
      // the read times out (300 ms): before, the batch was dropped and the stream went on
      const ended = (async () => {
        for (;;) if ((await reader.read()).done) return 'ended';
      })();
      expect(await Promise.race([ended, sleep(10_000).then(() => 'still open')])).toBe('ended');
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      locker.release();
      await listening.close();
    }
  });
});
