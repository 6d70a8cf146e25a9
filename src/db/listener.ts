import pg from 'pg';
import type { Logger } from '../log.js';

export interface ListenerOptions {
  /** Who holds the connection, for log lines ("worker", "drainer"). */
  label: string;
  clientConfig: pg.ClientConfig;
  channels: string[];
  log: Logger;
  onNotification(channel: string, payload: string): void;
  /** Runs on every (re)connection, after LISTEN: e.g. register the worker and take its lock. */
  onConnect?(client: pg.Client): Promise<void>;
  /**
   * Runs once a (re)connection is up (`connected` is true, onConnect has run): wake here
   * what waited for the database. Code woken in onConnect still sees `connected` false.
   */
  onReady?(): void;
  /** Called when the connection is lost (before reconnecting). */
  onDisconnect(): void;
}

/** Reconnect attempts start this far apart and double up to MAX_RETRY_MS. */
const FIRST_RETRY_MS = 100;
/**
 * A restarted server is found within this long of accepting connections. At 1 s, workers
 * registered up to a second late (750–780 ms after a 1.8 s restart in the quick chaos).
 * A failed attempt costs a refused connection or a "starting up" reply: 4 a second is
 * as cheap as the upkeep's own attempts meanwhile.
 */
const MAX_RETRY_MS = 250;

const listenSql = (channel: string) => `LISTEN "${channel.replaceAll('"', '""')}"`;

/**
 * A dedicated connection that LISTENs and holds a session lock (a worker's id, the
 * drainer's). It reconnects by itself, with backoff, after a server restart or a
 * terminated backend.
 */
export class Listener {
  readonly #options: ListenerOptions;
  #client: pg.Client | null = null;
  #connected = false;
  #stopped = false;
  #retryMs = FIRST_RETRY_MS;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: ListenerOptions) {
    this.#options = options;
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** The live connection, or null while reconnecting. */
  get client(): pg.Client | null {
    return this.#connected ? this.#client : null;
  }

  /** Adds a channel: LISTENed now if connected, and on every reconnection. */
  async listen(channel: string): Promise<void> {
    if (this.#options.channels.includes(channel)) return;
    this.#options.channels.push(channel);
    const client = this.client;
    if (client) await client.query(listenSql(channel));
  }

  /** Connects once; the first failure is thrown, later ones are retried. */
  async start(): Promise<void> {
    await this.#connect();
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({ ...this.#options.clientConfig, keepAlive: true });
    this.#client = client;
    client.on('error', (error) => this.#lost(client, error));
    client.on('end', () => this.#lost(client, null));
    client.on('notification', (n) => this.#options.onNotification(n.channel, n.payload ?? ''));
    try {
      await client.connect();
      let listened = 0;
      for (; listened < this.#options.channels.length; listened++) {
        await client.query(listenSql(this.#options.channels[listened] as string));
      }
      await this.#options.onConnect?.(client);
      // channels added by listen() while this connection was being made
      for (; listened < this.#options.channels.length; listened++) {
        await client.query(listenSql(this.#options.channels[listened] as string));
      }
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => {});
      if (this.#client === client) this.#client = null;
      throw error;
    }
    this.#connected = true;
    this.#retryMs = FIRST_RETRY_MS;
    this.#options.onReady?.();
  }

  #lost(client: pg.Client, error: Error | null): void {
    if (this.#client !== client || this.#stopped) return;
    this.#client = null;
    const wasConnected = this.#connected;
    this.#connected = false;
    client.removeAllListeners('end');
    client.end().catch(() => {});
    if (wasConnected) {
      this.#options.log.warn(
        { err: error ?? undefined },
        `${this.#options.label} lost its database connection; reconnecting`,
      );
      this.#options.onDisconnect();
    }
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#stopped || this.#timer) return;
    this.#timer = setTimeout(async () => {
      this.#timer = null;
      try {
        await this.#connect();
        this.#options.log.info({}, `${this.#options.label} reconnected to the database`);
      } catch (error) {
        this.#options.log.debug({ err: error }, 'reconnect failed');
        this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
        this.#scheduleReconnect();
      }
    }, this.#retryMs);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    const client = this.#client;
    this.#client = null;
    this.#connected = false;
    if (client) {
      client.removeAllListeners('end');
      await client.end().catch(() => {});
    }
  }
}
