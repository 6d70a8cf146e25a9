import { Hono } from 'hono';
import { every } from 'hono/combine';
import type { Logger } from '../log.js';
import { parse } from '../validation/validate.js';
import type { Api } from './api.js';
import { type BodyLimits, readText } from './body.js';
import { mountDashboard } from './dashboard.js';
import { type Endpoint, endpoint } from './endpoint.js';
import type { AppEnv } from './env.js';
import { errorHandler, HttpError } from './errors.js';
import { jsonWrites, loopbackOnly, noStore } from './guard.js';
import { openApiDocument } from './openapi.js';
import { type RateLimit, rateLimit } from './rateLimit.js';
import { adminEndpoints } from './routes/admin.js';
import { jobEndpoints } from './routes/jobs.js';
import { leaseEndpoints } from './routes/leases.js';
import { scheduleEndpoints } from './routes/schedules.js';

export interface AppOptions {
  /** Serve the dashboard at `/`. */
  dashboard: boolean;
  /** Largest request bodies. */
  limits: Required<BodyLimits>;
  /** Requests per token; null for no limit. */
  rateLimit: RateLimit | null;
  /** Answer loopback Host names and origins only (a server without auth). */
  loopbackOnly: boolean;
}

/** Every endpoint of the API (and /metrics), as documented in /api/openapi.json. */
export function endpoints(api: Api): Endpoint[] {
  return [...jobEndpoints(api), ...leaseEndpoints(api), ...adminEndpoints(api), ...scheduleEndpoints(api)];
}

/** Reads a JSON body within its limit; an empty one is `{}` where the endpoint allows it. */
async function readBody(e: Endpoint, request: Request, limits: Required<BodyLimits>): Promise<unknown> {
  const text = await readText(request, e.batchBody ? limits : { maxBytes: limits.maxBytes });
  if (text.trim() === '') {
    if (e.bodyOptional) return {};
    throw new HttpError(400, 'invalid', 'body: a JSON body is required', 'body');
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, 'invalid', `body: not valid JSON (${(error as Error).message})`, 'body');
  }
}

/** The Hono app: API, OpenAPI document, metrics and dashboard. */
export function createApp(api: Api, log: Logger, options: AppOptions): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.onError(errorHandler(log));
  app.notFound((c) => c.json({ error: { code: 'not_found', message: `no route ${c.req.method} ${c.req.path}` } }, 404));
  if (options.loopbackOnly) app.use('*', loopbackOnly);
  app.use('/api/*', noStore);
  app.use('/metrics', noStore);
  const limited = options.rateLimit ? rateLimit(options.rateLimit) : null;
  const list = endpoints(api);
  let document: Record<string, unknown> = {};
  list.push(
    endpoint({
      method: 'get',
      path: '/api/openapi.json',
      tag: 'server',
      access: 'public',
      summary: 'This document',
      responses: { 200: { description: 'OpenAPI 3.1', contentType: 'application/json' } },
      handle: (c) => c.json(document),
    }),
  );
  document = openApiDocument(list);
  for (const e of list) {
    const checks = [api.auth.check(e.access)];
    if (e.method !== 'get') checks.unshift(jsonWrites);
    if (limited && e.access !== 'public') checks.push(limited);
    app.on(e.method.toUpperCase(), e.path, every(...checks), async (c) => {
      const query = e.query ? parse(e.query, c.req.query(), 'query') : undefined;
      let body: unknown;
      if (e.body) {
        const raw = await readBody(e, c.req.raw, options.limits);
        body = e.parseBody ? e.parseBody(raw) : parse(e.body, raw, 'body');
      }
      return e.handle(c, { query, body });
    });
  }
  if (options.dashboard) mountDashboard(app);
  return app;
}
