import { TuskValidationError } from '../errors.js';

/**
 * What a connection string may be: a `postgres://` or `postgresql://` URL, a `socket:`
 * URL, or a socket folder (`/var/run/postgresql dbname`), as `pg` reads them. Anything
 * else `pg` would take for a host name (`notaurl` → "getaddrinfo ENOTFOUND base").
 */
export function checkConnectionString(url: string, field: string): void {
  if (url.startsWith('/')) return;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TuskValidationError(field, `is not a PostgreSQL URL (postgres://user:password@host:5432/database)`);
  }
  if (!['postgres:', 'postgresql:', 'socket:'].includes(parsed.protocol)) {
    throw new TuskValidationError(
      field,
      `is not a PostgreSQL URL: its scheme is ${parsed.protocol} (postgres://user:password@host:5432/database)`,
    );
  }
}

/** The server a connection string names, `host:port` (or the socket folder), for messages; never the password. */
export function serverOf(url: string): string {
  if (url.startsWith('/')) return url.split(' ')[0] ?? url;
  try {
    const parsed = new URL(url);
    if (parsed.protocol === 'socket:') return decodeURI(parsed.pathname);
    const host = parsed.searchParams.get('host') ?? (decodeURIComponent(parsed.hostname) || 'localhost');
    if (host.startsWith('/')) return host;
    return `${host}:${parsed.searchParams.get('port') ?? (parsed.port || '5432')}`;
  } catch {
    return 'the server';
  }
}
