import type { Command } from 'commander';
import { checkConnectionString } from '../db/url.js';
import { TuskValidationError } from '../errors.js';
import { Tusk } from '../tusk.js';
import type { UrlSource } from './errors.js';

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

/** Runs a command's work with a Tusk, closed afterwards. */
export async function withTusk<T>(command: Command, run: (tusk: Tusk) => Promise<T>): Promise<T> {
  const tusk = tuskFor(command);
  try {
    return await run(tusk);
  } finally {
    await tusk.close();
  }
}
