import type { Command } from 'commander';
import { checkConnectionString } from '../db/url.js';
import { isConnectionError, TuskValidationError } from '../errors.js';
import { Tusk } from '../tusk.js';
import { databaseErrorLine, type UrlSource } from './errors.js';

/** Options every command takes. */
export interface GlobalOptions {
  databaseUrl?: string;
  schema?: string;
}

/**
 * The connection string of a command and where it came from: `--database-url`, else
 * DATABASE_URL, else none (the embedded server). Refuses one that is not a PostgreSQL URL.
 */
export function urlSource(command: Command): UrlSource {
  const flag = command.optsWithGlobals<GlobalOptions>().databaseUrl;
  const source: UrlSource = flag
    ? { url: flag, from: '--database-url' }
    : process.env.DATABASE_URL
      ? { url: process.env.DATABASE_URL, from: 'DATABASE_URL' }
      : { url: undefined, from: null };
  if (source.url && source.from) checkConnectionString(source.url, source.from);
  return source;
}

/** A Tusk for a CLI command: `--database-url`, else DATABASE_URL, else embedded. */
export function tuskFor(command: Command): Tusk {
  const { url } = urlSource(command);
  const { schema } = command.optsWithGlobals<GlobalOptions>();
  return new Tusk({
    ...(url ? { connectionString: url } : {}),
    ...(schema ? { schema } : {}),
  });
}

/** An option's bad value, reported like the API's: `tusk: --delay: must be ...`. */
export const optionError = (flag: string, message: string) => new TuskValidationError(flag, message);

/**
 * Parses an integer option, with the option's name and the value in the error. Decimal
 * digits only: Number() would read '' and ' ' as 0, '0x10' as 16 and '1e3' as 1000.
 */
export function intOption(name: string, min = 0, max?: number) {
  const range = max === undefined ? `>= ${min}` : `from ${min} to ${max}`;
  return (value: string): number => {
    const n = /^-?\d{1,16}$/.test(value) ? Number(value) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || (max !== undefined && n > max)) {
      throw optionError(name, `must be an integer ${range} (got ${JSON.stringify(value)})`);
    }
    return n;
  };
}

/**
 * Waits for SIGINT or SIGTERM, then runs `stop` (a graceful stop of `what`); a second
 * signal exits at once. Resolves when `stop` is done (its failure sets the exit code).
 */
export function runUntilSignal(what: string, stop: () => Promise<void>): Promise<void> {
  return new Promise<void>((done) => {
    let stopping = false;
    const onSignal = (signal: string) => {
      if (stopping) {
        console.error(`tusk: ${signal} again, exiting now`);
        process.exit(130);
      }
      stopping = true;
      console.error(`tusk: ${signal}: stopping ${what} (again to force)`);
      stop()
        .catch((error) => {
          console.error(error);
          process.exitCode = 1;
        })
        .finally(done);
    };
    process.on('SIGINT', () => onSignal('SIGINT'));
    process.on('SIGTERM', () => onSignal('SIGTERM'));
  });
}

/**
 * Starts what `make` builds, again and again (with backoff) while the database cannot be
 * reached — a process started while the server restarts waits for it instead of exiting.
 * Other errors (no schema, bad password) are thrown. Null if a signal came meanwhile.
 */
export async function startPatiently<T extends { start(): Promise<void>; stop(): Promise<void> }>(
  make: () => T,
  what: string,
  source: UrlSource,
): Promise<T | null> {
  let signalled = false;
  let wake = () => {};
  const onSignal = () => {
    signalled = true;
    wake();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    for (let delayMs = 500; ; delayMs = Math.min(delayMs * 2, 10_000)) {
      const started = make();
      try {
        await started.start();
        // a signal that came while it started (its handler here took it): stop at once
        if (signalled) {
          await started.stop();
          return null;
        }
        return started;
      } catch (error) {
        if (!isConnectionError(error)) throw error;
        const why = databaseErrorLine(error, source) ?? (error as Error).message;
        console.error(`tusk: ${what} is waiting for the database: ${why}; retrying in ${delayMs / 1000} s`);
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delayMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      if (signalled) return null;
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Runs a command's work with a Tusk, closed afterwards. */
export async function withTusk<T>(command: Command, run: (tusk: Tusk) => Promise<T>): Promise<T> {
  const tusk = tuskFor(command);
  try {
    return await run(tusk);
  } finally {
    await tusk.close();
  }
}
