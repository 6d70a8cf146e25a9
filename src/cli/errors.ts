import { serverOf } from '../db/url.js';
import { TuskError } from '../errors.js';

/** Where the CLI's connection string came from, named in its errors. */
export interface UrlSource {
  url: string | undefined;
  /** `--database-url`, `DATABASE_URL`, or null for the embedded server. */
  from: '--database-url' | 'DATABASE_URL' | null;
}

/** Why a connection failed, by the system's error code. */
const NETWORK: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'unknown host',
  EAI_AGAIN: 'the host name could not be looked up',
  ETIMEDOUT: 'timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ECONNRESET: 'the connection was reset',
  EPIPE: 'the connection was closed',
  ENOENT: 'no server socket there',
  EACCES: 'permission denied',
};

/** SQLSTATEs of a refused connection: the server's own message says why. */
const REFUSED = new Set(['3D000', '28000', '28P01', '57P03', '53300', '08001', '08004', '08006']);

interface ErrorShape {
  code?: string;
  message?: string;
  errors?: ErrorShape[];
  address?: string;
  port?: number;
}

/**
 * One line for a database failure (without the `tusk: ` prefix), or null for an error
 * that is not one. `cannot connect to 127.0.0.1:5999: connection refused (DATABASE_URL)`:
 * the server, what went wrong, and where the URL came from.
 */
export function databaseErrorLine(error: unknown, source: UrlSource): string | null {
  if (!error || typeof error !== 'object' || error instanceof TuskError) return null;
  const e = error as ErrorShape;
  // `localhost` is tried on each of its addresses: an AggregateError holds their errors
  const code = e.code ?? e.errors?.[0]?.code;
  const server = source.url ? serverOf(source.url) : socketOf(e);
  const from = source.from ? ` (${source.from})` : ' (embedded PostgreSQL)';
  const message = (e.message ?? '').split('\n')[0] ?? '';
  if (code && NETWORK[code]) return `cannot connect to ${server}: ${NETWORK[code]}${from}`;
  if (code && REFUSED.has(code)) return `cannot connect to ${server}: ${message}${from}`;
  if (/^SASL: .*password must be a string/.test(message)) {
    return `cannot connect to ${server}: the server asks for a password and the URL has none${from}`;
  }
  if (/^Connection terminated|^timeout exceeded when trying to connect|connection timeout/i.test(message)) {
    return `lost the connection to ${server}: ${message.toLowerCase()}${from}`;
  }
  if (/does not support SSL|SSL connection/i.test(message)) return `cannot connect to ${server}: ${message}${from}`;
  // any other error from the server: its message and SQLSTATE
  if (code && /^[0-9A-Z]{5}$/.test(code) && 'severity' in error) return `PostgreSQL: ${message} (SQLSTATE ${code})`;
  return null;
}

function socketOf(e: ErrorShape): string {
  const first = e.address ? e : e.errors?.[0];
  return first?.address ? `${first.address}${first.port ? `:${first.port}` : ''}` : 'the server';
}
