import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL that can cut clients off: connect through `url`,
 * then `cut()` stops forwarding in both directions (a network partition: the connections
 * stay open, nothing gets through, what was sent waits), `holdReplies()` stops only what
 * the server sends, and `heal()` lets everything through again, held bytes first.
 */
export class PgProxy {
  readonly #target: URL;
  readonly #pairs = new Set<{ client: Socket; server: Socket }>();
  #server: Server | null = null;
  #toServer = true;
  #toClient = true;
  #url = '';

  constructor(databaseUrl: string) {
    this.#target = new URL(databaseUrl);
  }

  /** The connection string through the proxy. */
  get url(): string {
    return this.#url;
  }

  async start(): Promise<void> {
    const server = createServer((client) => this.#accept(client));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    this.#server = server;
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('proxy: no port');
    const url = new URL(this.#target.href);
    url.hostname = '127.0.0.1';
    url.port = String(address.port);
    this.#url = url.href;
  }

  #accept(client: Socket): void {
    const server = connect(Number(this.#target.port || 5432), this.#target.hostname);
    const pair = { client, server };
    this.#pairs.add(pair);
    client.on('data', (d) => server.write(d));
    server.on('data', (d) => client.write(d));
    const end = () => {
      this.#pairs.delete(pair);
      client.destroy();
      server.destroy();
    };
    client.on('close', end);
    server.on('close', end);
    client.on('error', end);
    server.on('error', end);
    this.#apply(pair);
  }

  #apply({ client, server }: { client: Socket; server: Socket }): void {
    if (this.#toServer) client.resume();
    else client.pause();
    if (this.#toClient) server.resume();
    else server.pause();
  }

  #set(toServer: boolean, toClient: boolean): void {
    this.#toServer = toServer;
    this.#toClient = toClient;
    for (const pair of this.#pairs) this.#apply(pair);
  }

  /** Nothing gets through either way until `heal()`. */
  cut(): void {
    this.#set(false, false);
  }

  /** Queries reach the server; its replies (and notifications) wait until `heal()`. */
  holdReplies(): void {
    this.#set(true, false);
  }

  heal(): void {
    this.#set(true, true);
  }

  async close(): Promise<void> {
    for (const { client, server } of this.#pairs) {
      client.destroy();
      server.destroy();
    }
    this.#pairs.clear();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }
}
