import { activity, workers } from '../../client/inspect.js';
import { parse } from '../../validation/validate.js';
import { VERSION } from '../../version.js';
import type { Api } from '../api.js';
import { roleOf, sees } from '../auth.js';
import { type Endpoint, endpoint } from '../endpoint.js';
import { HttpError, inBody, notFound } from '../errors.js';
import {
  errorSchema,
  healthSchema,
  pausedQueuesSchema,
  queueListSchema,
  queuePausedSchema,
  recordedTaskListSchema,
  statsQuery,
  statsSchema,
  tenantListSchema,
  tenantParam,
  tenantPatch,
  tenantSchema,
  timeseriesQuery,
  timeseriesSchema,
  whoamiSchema,
  workerListSchema,
} from '../schemas.js';
import { SCOPES } from '../scopes.js';
import { invalidDoc, searchDocs, timeoutDoc } from './errorDocs.js';

const tenantOf = (name: string | undefined) => parse(tenantParam, name, 'tenant');

/** Health, identity, tenants, queues, workers, stats, activity and metrics. */
export function adminEndpoints(api: Api): Endpoint[] {
  const endpoints: Endpoint[] = [
    endpoint({
      method: 'get',
      path: '/api/health',
      tag: 'server',
      access: 'public',
      summary: 'The server is up and reaches the database',
      responses: { 200: { description: 'up', schema: healthSchema } },
      async handle(c) {
        await (await api.db()).query('SELECT 1');
        return c.json({ ok: true, version: VERSION });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/whoami',
      tag: 'server',
      access: 'token',
      summary: 'What the token may do: whose jobs (a tenant, or every one) and its scopes',
      responses: { 200: { description: 'the caller', schema: whoamiSchema } },
      async handle(c) {
        const p = c.get('principal');
        return c.json({
          role: roleOf(p),
          tenant: p.tenant,
          scopes: SCOPES.filter((s) => p.scopes.has(s)),
          auth: await api.auth.required(),
        });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/tenants',
      tag: 'tenants',
      access: 'admin',
      summary: 'Every tenant with settings or unfinished jobs: slots, running, waiting',
      responses: { 200: { description: 'the tenants', schema: tenantListSchema }, 503: timeoutDoc },
      async handle(c) {
        return c.json({ tenants: await (await api.pools.reader()).tenants.list() });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/tenants/:tenant',
      tag: 'tenants',
      access: 'read',
      summary: 'One tenant (a tenant token: its own)',
      description: 'Counts its unfinished jobs: runs under the statement timeout of lists and searches (503 past it).',
      responses: {
        200: { description: 'the tenant', schema: tenantSchema },
        404: { description: 'no settings and no jobs (or not this token’s tenant)', schema: errorSchema },
        503: timeoutDoc,
      },
      async handle(c) {
        const tenant = tenantOf(c.req.param('tenant'));
        if (!sees(c.get('principal'), tenant)) throw notFound('tenant');
        // its counts read jobs: on the reads' pool and under their timeout, as the list
        const info = await (await api.pools.reader()).tenants.get(tenant);
        if (!info) throw notFound('tenant');
        return c.json(info);
      },
    }),
    endpoint({
      method: 'patch',
      path: '/api/tenants/:tenant',
      tag: 'tenants',
      access: 'admin',
      summary: 'Create a tenant or change its slots, per-key limit or pause (others stay)',
      body: tenantPatch,
      responses: { 200: { description: 'the tenant now', schema: tenantSchema }, 400: invalidDoc },
      async handle(c, { body }) {
        const tenant = tenantOf(c.req.param('tenant'));
        return c.json(await inBody(() => api.tusk.tenants.set(tenant, body)));
      },
    }),
  ];
  for (const paused of [true, false]) {
    endpoints.push(
      endpoint({
        method: 'post',
        path: `/api/tenants/:tenant/${paused ? 'pause' : 'resume'}`,
        tag: 'tenants',
        access: 'admin',
        summary: paused ? 'Stop new claims for a tenant (running jobs go on)' : 'Claim a paused tenant’s jobs again',
        responses: { 200: { description: 'the tenant now', schema: tenantSchema } },
        async handle(c) {
          return c.json(await api.tusk.tenants.set(tenantOf(c.req.param('tenant')), { paused }));
        },
      }),
    );
  }
  for (const paused of [true, false]) {
    endpoints.push(
      endpoint({
        method: 'post',
        path: `/api/queues/:queue/${paused ? 'pause' : 'resume'}`,
        tag: 'queues',
        access: 'admin',
        summary: paused
          ? 'Stop claims of a queue’s jobs, for every worker (running jobs go on)'
          : 'Claim a paused queue’s jobs again',
        responses: {
          200: { description: 'whether that changed anything', schema: queuePausedSchema },
          400: invalidDoc,
        },
        async handle(c) {
          const queue = c.req.param('queue') ?? '';
          const changed = await inBody(() => (paused ? api.tusk.queues.pause(queue) : api.tusk.queues.resume(queue)));
          return c.json({ queue, paused, changed });
        },
      }),
    );
  }
  endpoints.push(
    endpoint({
      method: 'get',
      path: '/api/queues/paused',
      tag: 'queues',
      access: 'admin',
      summary: 'The paused queues',
      responses: { 200: { description: 'the paused queues', schema: pausedQueuesSchema } },
      async handle(c) {
        return c.json({ queues: await api.tusk.queues.paused() });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/tasks',
      tag: 'monitoring',
      access: 'admin',
      summary: 'The task definitions workers recorded: what producers without the task list apply',
      responses: { 200: { description: 'the tasks', schema: recordedTaskListSchema } },
      async handle(c) {
        return c.json({ tasks: await api.tusk.recordedTasks() });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/queues',
      tag: 'monitoring',
      access: 'admin',
      summary: 'Queues: jobs by state (finished ones over the last hour) and the oldest waiting job',
      responses: { 200: { description: 'the queues', schema: queueListSchema }, 503: timeoutDoc },
      async handle(c) {
        const { since, queues } = await (await api.pools.reader()).stats();
        return c.json({ since, queues });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/workers',
      tag: 'monitoring',
      access: 'admin',
      summary: 'Registered workers: alive, last heartbeat, jobs in hand',
      responses: { 200: { description: 'the workers', schema: workerListSchema }, 503: timeoutDoc },
      async handle(c) {
        return c.json({ workers: await workers(await api.pools.reads(), api.schema) });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/stats',
      tag: 'monitoring',
      access: 'admin',
      summary: 'Jobs by state per tenant, per queue and in total; oldest waiting job',
      query: statsQuery,
      responses: { 200: { description: 'the counts', schema: statsSchema }, ...searchDocs },
      async handle(c, { query }) {
        const reader = await api.pools.reader();
        return c.json(await reader.stats(query.windowMs === undefined ? {} : { windowMs: query.windowMs }));
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/timeseries',
      tag: 'monitoring',
      access: 'admin',
      summary: 'Jobs enqueued and finished per time bucket, with wait and run time percentiles',
      query: timeseriesQuery,
      responses: { 200: { description: 'buckets, oldest first', schema: timeseriesSchema }, ...searchDocs },
      async handle(c, { query }) {
        const minutes = query.minutes ?? 60;
        const bucketSeconds = query.bucketSeconds ?? 60;
        if ((minutes * 60) / bucketSeconds > 1440) {
          throw new HttpError(
            400,
            'invalid',
            'query.bucketSeconds: at most 1 440 buckets per window',
            'query.bucketSeconds',
          );
        }
        const buckets = await activity(await api.pools.reads(), api.schema, {
          windowSeconds: minutes * 60,
          bucketSeconds,
          tenant: query.tenant ?? null,
          queue: query.queue ?? null,
        });
        return c.json({ bucketSeconds, buckets });
      },
    }),
  );
  const metrics = api.metrics;
  if (metrics) {
    endpoints.push(
      endpoint({
        method: 'get',
        path: '/metrics',
        tag: 'monitoring',
        access: 'metrics',
        summary: 'Prometheus metrics, read from the database at each scrape (see docs/http.md for each metric)',
        responses: { 200: { description: 'Prometheus text format', contentType: metrics.contentType } },
        async handle(c) {
          return c.body(await metrics.render(), 200, { 'content-type': metrics.contentType });
        },
      }),
    );
  }
  return endpoints;
}
