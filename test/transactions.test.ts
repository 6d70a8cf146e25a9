import { TransactionRollbackError } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { type TransactionLike, TuskValidationError } from '../src/index.js';
import { eventually, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: db.pool }) });
// both share the file's pool, which the test helper ends (kysely.destroy() would end it too early)
const drizzleDb = drizzle(db.pool);

const jobsOf = async (task: string) =>
  Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.jobs WHERE task = $1', [task]))[0]?.n);
const stagedOf = async (task: string) =>
  Number((await db.rows<{ n: string }>('SELECT count(*) AS n FROM $schema.staged_jobs WHERE task = $1', [task]))[0]?.n);

/** Runs `work` in a transaction of the given kind, committing or rolling back. */
type InTransaction = (commit: boolean, work: (tx: TransactionLike) => Promise<void>) => Promise<void>;

class Rollback extends Error {}

/** A transaction on a pg PoolClient, handed to `work` as `as(client)`. */
const onPg =
  (as: (client: pg.PoolClient) => TransactionLike): InTransaction =>
  async (commit, work) => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await work(as(client));
      await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    } catch (error) {
      // a test failing inside leaves no transaction open on the file's pool
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  };

const onPgClient = onPg((client) => client);

const onKysely: InTransaction = async (commit, work) => {
  await kysely
    .transaction()
    .execute(async (trx) => {
      await work(trx);
      if (!commit) throw new Rollback();
    })
    .catch((error) => {
      if (!(error instanceof Rollback)) throw error;
    });
};

const onDrizzle: InTransaction = async (commit, work) => {
  await drizzleDb
    .transaction(async (tx) => {
      await work(tx);
      if (!commit) tx.rollback();
    })
    .catch((error) => {
      if (!(error instanceof TransactionRollbackError)) throw error;
    });
};

/** The documented seam: any `query(text, values)`; this one answers bare row arrays. */
const onQueryFunction = onPg((client) => ({
  query: async (text: string, values?: unknown[]) => (await client.query(text, values)).rows,
}));

const kinds: Array<[string, InTransaction]> = [
  ['pg PoolClient', onPgClient],
  ['Kysely transaction', onKysely],
  ['Drizzle transaction', onDrizzle],
  ['query(text, values) object', onQueryFunction],
];

describe.each(kinds)('transactional enqueue through a %s', (kind, inTransaction) => {
  const task = `tx_${kind.replace(/\W+/g, '_')}`;

  it('commits with the transaction: enqueue, enqueueMany (COPY-sized), dedup and stage', async () => {
    await inTransaction(true, async (tx) => {
      await db.tusk.enqueue(task, { n: 1 }, { client: tx, tenant: 'acme', delayMs: 10 });
      await db.tusk.enqueue(task, { n: 2 }, { client: tx, dedupKey: `once-${task}` });
      const { ids } = await db.tusk.enqueueMany(
        Array.from({ length: 600 }, (_, i) => ({ task, payload: { i } })),
        { client: tx },
      );
      expect(ids).toHaveLength(600);
      await db.tusk.stage(tx, task, { staged: true });
      await db.tusk.stageMany(tx, [
        { task, payload: 1 },
        { task, payload: 2, queue: 'q' },
      ]);
      // nothing is visible outside the transaction before it commits
      expect(await jobsOf(task)).toBe(0);
      expect(await stagedOf(task)).toBe(0);
    });
    expect(await jobsOf(task)).toBe(602);
    expect(await stagedOf(task)).toBe(3);
    const [job] = await db.rows<{ tenant: string; payload: unknown }>(
      "SELECT tenant, payload FROM $schema.jobs WHERE task = $1 AND payload->>'n' = '1'",
      [task],
    );
    expect(job).toEqual({ tenant: 'acme', payload: { n: 1 } });
  });

  it('rolls back with the transaction: nothing is left', async () => {
    const rolled = `${task}_rolled`;
    await inTransaction(false, async (tx) => {
      await db.tusk.enqueue(rolled, { n: 1 }, { client: tx });
      await db.tusk.enqueueMany(
        Array.from({ length: 600 }, () => ({ task: rolled })),
        { client: tx },
      );
      await db.tusk.stage(tx, rolled, {});
    });
    expect(await jobsOf(rolled)).toBe(0);
    expect(await stagedOf(rolled)).toBe(0);
  });
});

describe('the race of staging: an idle worker never sees an uncommitted job', () => {
  // the jobs the tests above left: the worker would promote the delayed ones, an
  // announcement on the channel these tests listen to
  beforeAll(() => db.rows('DELETE FROM $schema.jobs'));

  it.each([
    ['pg PoolClient', onPgClient],
    ['Kysely transaction', onKysely],
  ] as Array<[string, InTransaction]>)('through a %s', async (_kind, inTransaction) => {
    const seen: unknown[] = [];
    // a poll period far beyond the test: only the NOTIFY sent at commit can wake it
    const worker = db.worker({
      tasks: { race: async (payload) => void seen.push(payload) },
      pollMs: 600_000,
      maintenanceMs: 600_000,
    });
    await worker.start();
    // what could wake an idle worker, heard as it would: notifications come in commit order
    const heard: string[] = [];
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    try {
      listener.on('notification', (n) => heard.push(n.channel));
      await listener.query(`LISTEN "${db.schema}:jobs"`);
      await listener.query(`LISTEN "${db.schema}:probe"`);
      await inTransaction(true, async (tx) => {
        const { id } = await db.tusk.enqueue('race', { at: 'in tx' }, { client: tx });
        // a probe sent after the enqueue comes after anything the enqueue let out before its commit
        await db.pool.query('SELECT pg_notify($1, $2)', [`${db.schema}:probe`, '']);
        await eventually(() => heard.length > 0);
        expect(heard).toEqual([`${db.schema}:probe`]);
        expect(seen).toEqual([]);
        expect(await db.tusk.getJob(id)).toBeNull();
      });
      await eventually(() => seen.length === 1, 5000);
      // the enqueue's announcement, let out by the commit
      await eventually(() => heard[1] === `${db.schema}:jobs`);
    } finally {
      await listener.end();
    }
    expect(seen).toEqual([{ at: 'in tx' }]);
    await worker.stop();
  });
});

describe('a transaction that is not one', () => {
  it.each([
    ['a plain object', {}],
    ['a number', 42],
    ['a string', 'BEGIN'],
    ['an object with execute() only', { execute: async () => [] }],
  ])('%s: a clear error naming the supported kinds, nothing written', async (_what, client) => {
    const supported =
      /pg Client or PoolClient.*Kysely transaction, a Drizzle transaction, or an object with a query\(text, values\) method/;
    await expect(db.tusk.enqueue('bad_client', {}, { client: client as TransactionLike })).rejects.toThrow(
      TuskValidationError,
    );
    await expect(db.tusk.enqueue('bad_client', {}, { client: client as TransactionLike })).rejects.toThrow(supported);
    await expect(db.tusk.enqueueMany([{ task: 'bad_client' }], { client: client as TransactionLike })).rejects.toThrow(
      supported,
    );
    await expect(db.tusk.stage(client as TransactionLike, 'bad_client')).rejects.toThrow(/^tx: must be a pg Client/);
    expect(await jobsOf('bad_client')).toBe(0);
    expect(await stagedOf('bad_client')).toBe(0);
  });

  it('a query() answering something else than rows is refused', async () => {
    const odd = { query: async () => 'ok' };
    await expect(db.tusk.enqueue('odd', {}, { client: odd })).rejects.toThrow(/must resolve to \{ rows \} or an array/);
  });

  it('a pg Pool is accepted (no transaction: the job commits at once)', async () => {
    const pool: pg.Pool = db.pool;
    await db.tusk.enqueue('pooled', {}, { client: pool });
    expect(await jobsOf('pooled')).toBe(1);
  });
});
