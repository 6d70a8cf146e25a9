import { isConnectionError } from '../errors.js';
import { databaseErrorLine, type UrlSource } from './errors.js';

/**
 * The stop request of a long-running command (worker, drain, serve, upkeep): its first
 * SIGINT or SIGTERM, listened to from before the command starts until it exits; a second
 * signal exits at once.
 *
 * One listener for the whole run, on purpose: a signal Node has taken in but not yet handed
 * to JavaScript is dropped when its listener is removed meanwhile. A start-up listener
 * handing over to a run listener lost a SIGTERM sent just as "worker started" was logged,
 * and the process ran on.
 *
 * @example
 * const stop = new StopSignal();
 * const worker = await startPatiently(() => tusk.worker(options), 'the worker', source, stop);
 * if (worker) await runUntilSignal('the worker', () => tusk.close(), stop);
 */
export class StopSignal {
  #signal: string | null = null;
  #waiters: Array<(signal: string) => void> = [];

  constructor() {
    const on = (signal: string) => {
      if (this.#signal !== null) {
        console.error(`tusk: ${signal} again, exiting now`);
        process.exit(130);
      }
      this.#signal = signal;
      for (const wake of this.#waiters.splice(0)) wake(signal);
    };
    process.on('SIGINT', () => on('SIGINT'));
    process.on('SIGTERM', () => on('SIGTERM'));
  }

  /** The signal's name once one came, else null. */
  get received(): string | null {
    return this.#signal;
  }

  /** Resolves with the signal's name when one comes (at once if one came). */
  wait(): Promise<string> {
    const signal = this.#signal;
    if (signal !== null) return Promise.resolve(signal);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
}

/**
 * Waits for the stop signal, then runs `stop` (a graceful stop of `what`). Resolves when
 * `stop` is done; its failure is printed and sets the exit code.
 */
export async function runUntilSignal(what: string, stop: () => Promise<void>, signal: StopSignal): Promise<void> {
  const name = await signal.wait();
  console.error(`tusk: ${name}: stopping ${what} (again to force)`);
  try {
    await stop();
  } catch (error) {
    console.error(error);
    process.exitCode = 1;
  }
}

/**
 * Starts what `make` builds, again and again (with backoff) while the database cannot be
 * reached — a process started while the server restarts waits for it instead of exiting.
 * Other errors (no schema, bad password) are thrown. Null if the stop signal came first
 * (what had started meanwhile is stopped).
 */
export async function startPatiently<T extends { start(): Promise<void>; stop(): Promise<void> }>(
  make: () => T,
  what: string,
  source: UrlSource,
  signal: StopSignal,
): Promise<T | null> {
  for (let delayMs = 500; ; delayMs = Math.min(delayMs * 2, 10_000)) {
    const started = make();
    try {
      await started.start();
      if (signal.received) {
        await started.stop();
        return null;
      }
      return started;
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      const why = databaseErrorLine(error, source) ?? (error as Error).message;
      console.error(`tusk: ${what} is waiting for the database: ${why}; retrying in ${delayMs / 1000} s`);
    }
    let timer: NodeJS.Timeout | undefined;
    const elapsed = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, delayMs);
    });
    await Promise.race([elapsed, signal.wait()]);
    clearTimeout(timer);
    if (signal.received) return null;
  }
}
