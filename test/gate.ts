import net from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL that can cut its clients off as a server restart
 * does: every connection through it dropped, new ones closed at once, until `restore()`.
 * Only the clients given `url` are hit; the server and everyone else carry on.
 */
export class Gate {
  readonly #target: URL;
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  #open = true;
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

  cut(): void {
    this.#open = false;
    for (const socket of this.#sockets) socket.destroy();
  }

  restore(): void {
    this.#open = true;
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
    for (const [a, b] of [
      [client, server],
      [server, client],
    ] as const) {
      this.#sockets.add(a);
      a.pipe(b);
      a.on('error', () => b.destroy());
      a.on('close', () => {
        this.#sockets.delete(a);
        b.destroy();
      });
    }
  }
}
