import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { parse } from '../client/validate.js';
import type { Logger } from '../log.js';
import type { Api } from './api.js';
import { mountDashboard } from './dashboard.js';
import { type Endpoint, endpoint } from './endpoint.js';
import type { AppEnv } from './env.js';
import { errorHandler, HttpError } from './errors.js';
import { openApiDocument } from './openapi.js';
import { adminEndpoints } from './routes/admin.js';
import { jobEndpoints } from './routes/jobs.js';
import { leaseEndpoints } from './routes/leases.js';

export interface AppOptions {
  /** Serve the dashboard at `/`. */
  dashboard: boolean;
  /** Largest request body. */
  maxBodyBytes: number;
}

/** Every endpoint of the API (and /metrics), as documented in /api/openapi.json. */
export function endpoints(api: Api): Endpoint[] {
  return [...jobEndpoints(api), ...leaseEndpoints(api), ...adminEndpoints(api)];
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Reads a JSON body; an empty one is `{}` where the endpoint allows it. */
async function readBody(e: Endpoint, request: Request): Promise<unknown> {
  const bytes = await request.arrayBuffer();
  let text: string;
  try {
    // fatal: request.text() would turn bad bytes into U+FFFD, silently changing the data
    text = utf8.decode(bytes);
  } catch {
    throw new HttpError(400, 'invalid', 'body: not valid UTF-8', 'body');
  }
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
  app.use(
    '/api/*',
    bodyLimit({
      maxSize: options.maxBodyBytes,
      onError: () => {
        throw new HttpError(413, 'too_large', `body: over the limit of ${options.maxBodyBytes} bytes`, 'body');
      },
    }),
  );

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
    app.on(e.method.toUpperCase(), e.path, api.auth.check(e.access), async (c) => {
      const query = e.query ? parse(e.query, c.req.query(), 'query') : undefined;
      let body: unknown;
      if (e.body) {
        const raw = await readBody(e, c.req.raw);
        body = e.parseBody ? e.parseBody(raw) : parse(e.body, raw, 'body');
      }
      return e.handle(c, { query, body });
    });
  }
  if (options.dashboard) mountDashboard(app);
  return app;
}
