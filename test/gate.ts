import net from 'node:net';

interface Pair {
  client: net.Socket;
  server: net.Socket;
  /** The port the server sees it come from (kept: a closed socket forgets it). */
  port: number | undefined;
  /** What the server sent while held, not passed on yet (null: it closed). */
  held: Array<Buffer | null>;
  /** Held from its first ReadyForQuery on (see holdNewFromReady). */
  holdAtReady: boolean;
  /** Where the server's message stream stands: bytes of a message still to skip, or a header in part. */
  parse: { skip: number; header: number[] };
}

/** Whether `chunk`, the next bytes of a server's stream, holds a ReadyForQuery message. */
function readyIn(chunk: Buffer, state: Pair['parse']): boolean {
  let found = false;
  for (let i = 0; i < chunk.length; ) {
    if (state.skip > 0) {
      const n = Math.min(state.skip, chunk.length - i);
      state.skip -= n;
      i += n;
      continue;
    }
    state.header.push(chunk[i] as number);
    i++;
    if (state.header.length === 5) {
      // a type byte, then the length of the rest, itself included
      const [type, a, b, c, d] = state.header as [number, number, number, number, number];
      if (type === 0x5a) found = true; // 'Z'
      state.skip = ((a << 24) | (b << 16) | (c << 8) | d) - 4;
      state.header = [];
    }
  }
  return found;
}

/**
 * A TCP proxy in front of PostgreSQL that can cut its clients off as a server restart
 * does: every connection through it dropped, new ones closed at once, until `restore()`.
 * It can also hold back what the server sends, and let it through connection by
 * connection, to order what the clients learn. Only the clients given `url` are hit.
 */
export class Gate {
  readonly #target: URL;
  readonly #server: net.Server;
  readonly #pairs = new Set<Pair>();
  #open = true;
  #holding = false;
  #holdNewAtReady = false;
  /** Connections closed at once while cut: the clients' attempts to come back. */
  refused = 0;

  private constructor(target: string) {
    this.#target = new URL(target);
    this.#server = net.createServer((client) => this.#accept(client));
  }

  static async open(target: string): Promise<Gate> {
    const gate = new Gate(target);
    await new Promise<void>((resolve) => gate.#server.listen(0, '127.0.0.1', resolve));
    return gate;
  }

  /** The target's URL, through the gate. */
  get url(): string {
    const url = new URL(this.#target);
    url.hostname = '127.0.0.1';
    url.port = String((this.#server.address() as net.AddressInfo).port);
    return url.toString();
  }

  /** The ports the server sees the gate's connections come from (pg_stat_activity.client_port). */
  ports(): number[] {
    return [...this.#pairs].map((p) => p.port).filter((port): port is number => port !== undefined);
  }

  /** Drops every connection and refuses new ones, until `restore()`. */
  cut(): void {
    this.refuse();
    for (const { client, server } of this.#pairs) {
      client.destroy();
      server.destroy();
    }
  }

  /** New connections are closed at once (the open ones carry on), until `restore()`. */
  refuse(): void {
    this.#open = false;
  }

  restore(): void {
    this.#open = true;
  }

  /** From now on, what the server sends is held back until `release`. */
  hold(): void {
    this.#holding = true;
  }

  /**
   * The connections made from now on pass their startup (authentication included) and
   * are held from the server's first ReadyForQuery on, until `release`.
   */
  holdNewFromReady(): void {
    this.#holdNewAtReady = true;
  }

  /** Passes on what was held: on the connection from `port` only, or on all (and stops holding). */
  release(port?: number): void {
    if (port === undefined) {
      this.#holding = false;
      this.#holdNewAtReady = false;
    }
    for (const pair of this.#pairs) {
      if (port !== undefined && pair.port !== port) continue;
      pair.holdAtReady = false;
      // in one write, so read at once: a message and the one after it reach the client together
      const held = pair.held.splice(0);
      const data = held.filter((chunk): chunk is Buffer => chunk !== null);
      if (data.length > 0) pair.client.write(Buffer.concat(data));
      if (held.includes(null)) pair.client.end();
    }
  }

  /** Whether the server closed the connection from `port` while what it sent was held. */
  closedWhileHeld(port: number): boolean {
    return [...this.#pairs].some((p) => p.port === port && p.held.includes(null));
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #accept(client: net.Socket): void {
    if (!this.#open) {
      this.refused++;
      client.destroy();
      return;
    }
    const server = net.connect(Number(this.#target.port || 5432), this.#target.hostname);
    const pair: Pair = {
      client,
      server,
      port: undefined,
      held: [],
      holdAtReady: this.#holdNewAtReady,
      parse: { skip: 0, header: [] },
    };
    this.#pairs.add(pair);
    server.on('connect', () => {
      pair.port = server.localPort;
    });
    const pass = (chunk: Buffer | null) => {
      const ready = pair.holdAtReady && chunk !== null && pair.held.length === 0 && readyIn(chunk, pair.parse);
      if (this.#holding || ready || pair.held.length > 0) pair.held.push(chunk);
      else if (chunk) client.write(chunk);
      else client.destroy();
    };
    client.pipe(server);
    server.on('data', pass);
    server.on('close', () => pass(null));
    server.on('error', () => {});
    client.on('error', () => server.destroy());
    client.on('close', () => {
      this.#pairs.delete(pair);
      server.destroy();
    });
  }
}
