import pg from 'pg';
import type { Logger } from '../log.js';
import { type EmbeddedOptions, type EmbeddedServer, startEmbedded } from './embedded.js';

/** How Tusk reaches PostgreSQL. With none of these, it starts an embedded server. */
export interface ConnectionOptions {
  /** `postgres://...`; default `DATABASE_URL`. */
  connectionString?: string | undefined;
  /** Your own pool; Tusk does not end it on close. */
  pool?: pg.Pool | undefined;
  /** Settings of the embedded server used when there is no URL and no pool. */
  embedded?: EmbeddedOptions | undefined;
  /** Size of the pool Tusk creates (default 10). */
  maxConnections?: number | undefined;
}

/** An open connection pool and what it takes to close it. */
export interface Database {
  pool: pg.Pool;
  /** Connection settings for dedicated clients (LISTEN); from the pool's own options. */
  clientConfig: pg.ClientConfig;
  embedded: EmbeddedServer | null;
  close(): Promise<void>;
}

export async function openDatabase(options: ConnectionOptions, log: Logger): Promise<Database> {
  if (options.pool) {
    const pool = options.pool;
    const unwatch = watchErrors(pool, log);
    return { pool, clientConfig: pool.options, embedded: null, close: async () => unwatch() };
  }
  let connectionString = options.connectionString ?? process.env.DATABASE_URL;
  let embedded: EmbeddedServer | null = null;
  if (!connectionString) {
    embedded = await startEmbedded(options.embedded, log);
    connectionString = embedded.connectionString;
    log.info(
      { dir: embedded.dir, dataDir: embedded.dataDir, port: embedded.port },
      `no DATABASE_URL given: ${embedded.started ? 'started' : 'using the running'} embedded PostgreSQL in ${embedded.dir} on 127.0.0.1:${embedded.port}`,
    );
  }
  const clientConfig: pg.ClientConfig = { connectionString, application_name: 'tusk' };
  const pool = new pg.Pool({ ...clientConfig, max: options.maxConnections ?? 10, onConnect: readCommitted });
  watchErrors(pool, log);
  return {
    pool,
    clientConfig,
    embedded,
    async close() {
      await pool.end();
      await embedded?.stop();
    },
  };
}

/**
 * The `onConnect` of the pools Tusk makes: every connection runs at READ COMMITTED,
 * whatever the database's or role's default. A claim counts tenants' running jobs under a
 * snapshot taken after it locks them, which a REPEATABLE READ or SERIALIZABLE transaction
 * does not give (the claim refuses to run in one). The pool hands the connection out once
 * this is done; if it fails, the connection is not handed out. A pool of the app's is left
 * as it is.
 */
export async function readCommitted(client: pg.ClientBase): Promise<void> {
  await client.query("SET default_transaction_isolation = 'read committed'");
}

/**
 * A connection that fails (server restart, pg_terminate_backend) is logged, never thrown;
 * returns what takes the listeners off again (a pool of the app's outlives its Tusk).
 */
function watchErrors(pool: pg.Pool, log: Logger): () => void {
  // an idle one: the pool drops it
  const idle = (error: Error) => log.warn({ err: error }, 'idle database connection failed');
  // One handed out has no pool listener, and one handed out by pool.connect() none of the
  // caller's before the caller's code runs: a FATAL read with the last startup message (a
  // backend terminated as it started) was thrown and ended the process. The failure also
  // fails the client's query or its next one, and the pool drops it when it comes back.
  const failed = (error: Error) => log.debug({ err: error }, 'database connection failed');
  const created = (client: pg.PoolClient) => client.on('error', failed);
  pool.on('error', idle);
  pool.on('connect', created);
  return () => {
    pool.off('error', idle);
    pool.off('connect', created);
  };
}
