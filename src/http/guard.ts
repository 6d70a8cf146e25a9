import type { MiddlewareHandler } from 'hono';
import type { AppEnv } from './env.js';
import { HttpError } from './errors.js';

/** Loopback names: what a browser can only reach on this machine (no DNS is asked). */
const LOOPBACK_NAME = /^(localhost|[\w-]+\.localhost|127(\.\d{1,3}){3}|\[::1\]|::1)$/i;

/** True for a loopback host name or address (`localhost`, `127.0.0.1`, `::1`), without a port. */
export const isLoopback = (host: string): boolean => LOOPBACK_NAME.test(host);

/** The host name of a Host header or an origin's authority, without the port. */
function hostName(authority: string): string {
  const ipv6 = /^(\[[^\]]*\])(:\d*)?$/.exec(authority);
  return ipv6?.[1] ?? authority.replace(/:\d*$/, '');
}

/**
 * For a server without auth: answers requests for loopback names only. A Host header
 * naming anything else is a page of another site whose name was pointed at this machine
 * (DNS rebinding), and an Origin of another site is a page that sends requests here: both
 * are refused (403), for the API and the dashboard alike.
 */
export const loopbackOnly: MiddlewareHandler<AppEnv> = async (c, next) => {
  const host = c.req.header('host') ?? new URL(c.req.url).host;
  if (!isLoopback(hostName(host))) {
    throw new HttpError(
      403,
      'forbidden_host',
      `this server has no auth and answers loopback names only (localhost, 127.0.0.1, [::1]), not Host ${JSON.stringify(host)}`,
    );
  }
  const origin = c.req.header('origin');
  if (origin !== undefined && !isLoopbackOrigin(origin)) {
    throw new HttpError(
      403,
      'forbidden_origin',
      `this server has no auth and answers pages of loopback origins only, not ${JSON.stringify(origin)}`,
    );
  }
  await next();
};

function isLoopbackOrigin(origin: string): boolean {
  try {
    const url = new URL(origin);
    return (url.protocol === 'http:' || url.protocol === 'https:') && isLoopback(url.hostname);
  } catch {
    return false; // "null" (a sandboxed page, a file) and anything unparseable
  }
}

/**
 * Writes (POST, PATCH) must say `Content-Type: application/json`, with a body or without:
 * a page of another site can send a form or text/plain without asking, but JSON only
 * after a CORS preflight, which this server does not answer.
 */
export const jsonWrites: MiddlewareHandler<AppEnv> = async (c, next) => {
  if (c.req.method !== 'GET' && c.req.method !== 'HEAD') {
    const type = c.req.header('content-type') ?? '';
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      throw new HttpError(
        415,
        'unsupported_media_type',
        `writes take JSON only: send Content-Type: application/json (got ${type ? JSON.stringify(type) : 'none'}), with a body or without`,
      );
    }
  }
  await next();
};

/** API answers are per caller and per moment: no cache may keep them. */
export const noStore: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  c.res.headers.set('cache-control', 'no-store');
  c.res.headers.set('x-content-type-options', 'nosniff');
};
