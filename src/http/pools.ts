import pg from 'pg';
import { readCommitted } from '../db/connection.js';
import { Tusk } from '../tusk.js';

/** Connections of the server's own pools, and the statement timeout of lists and searches. */
export interface PoolSizes {
  /** Lists and searches (jobs, stats, queues, tenants, workers, activity). Default 3. */
  reads: number;
  /** Leases: fetch, ack, nack, extend. Default 2. */
  leases: number;
  /** Statement timeout of the reads, in ms. Default 5 000. */
  readTimeoutMs: number;
}

export const DEFAULT_POOLS: PoolSizes = { reads: 3, leases: 2, readTimeoutMs: 5_000 };

/**
 * The server's two small pools besides the app's: one for lists and searches, with a
 * statement timeout, and one for the lease path. A tenant's pile of slow searches waits
 * for a read connection, or ends at the timeout, while fetches and acks and every other
 * request go on: they never wait behind it. Opened on first use, with the settings of the
 * app's pool.
 */
export class ServerPools {
  readonly #tusk: Tusk;
  readonly #sizes: PoolSizes;
  #open: Promise<{ reads: pg.Pool; reader: Tusk; leases: Tusk; leasePool: pg.Pool }> | null = null;

  constructor(tusk: Tusk, sizes: PoolSizes) {
    this.#tusk = tusk;
    this.#sizes = sizes;
  }

  /** The pool of lists and searches (statement timeout `readTimeoutMs`). */
  async reads(): Promise<pg.Pool> {
    return (await this.#pools()).reads;
  }

  /** A Tusk on the reads pool, for its stats and tenant lists. */
  async reader(): Promise<Tusk> {
    return (await this.#pools()).reader;
  }

  /** A Tusk on the lease pool: fetch, ack, nack, extend. */
  async leases(): Promise<Tusk> {
    return (await this.#pools()).leases;
  }

  /** The pool of the lease path, for the lookups it makes. */
  async leasePool(): Promise<pg.Pool> {
    return (await this.#pools()).leasePool;
  }

  async close(): Promise<void> {
    const open = await this.#open?.catch(() => null);
    this.#open = null;
    if (!open) return;
    await Promise.all([open.reader.close(), open.leases.close()]);
    await Promise.all([open.reads.end(), open.leasePool.end()]);
  }

  #pools() {
    this.#open ??= (async () => {
      const base = (await this.#tusk.pool()).options;
      const make = (name: string, max: number, extra: pg.PoolConfig = {}) => {
        // the app's settings, without what makes its pool its own
        const { max: _max, application_name: _name, onConnect, ...settings } = base as pg.PoolConfig;
        return new pg.Pool({
          ...settings,
          ...extra,
          max,
          application_name: name,
          allowExitOnIdle: true,
          // the app pool's own hook first (a pool Tusk made has this one only)
          onConnect: async (client) => {
            if (onConnect && onConnect !== readCommitted) await onConnect(client);
            await readCommitted(client);
          },
        });
      };
      const reads = make('tusk http reads', this.#sizes.reads, { statement_timeout: this.#sizes.readTimeoutMs });
      const leasePool = make('tusk http leases', this.#sizes.leases);
      const on = (pool: pg.Pool) =>
        new Tusk({
          pool,
          schema: this.#tusk.schema,
          logger: this.#tusk.logger,
          maxPayloadBytes: this.#tusk.maxPayloadBytes,
        });
      const pools = { reads, reader: on(reads), leases: on(leasePool), leasePool };
      // each Tusk adds its pool's error listeners as it opens: open them now, since some
      // routes use the pools directly (an idle connection terminated unheard ended the server)
      await Promise.all([pools.reader.pool(), pools.leases.pool()]);
      return pools;
    })().catch((error) => {
      this.#open = null;
      throw error;
    });
    return this.#open;
  }
}
