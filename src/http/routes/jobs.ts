import { ServerResponse } from 'node:http';
import { Http2ServerResponse } from 'node:http2';
import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import { jobPage } from '../../client/inspect.js';
import { jobId, toJob } from '../../client/jobs.js';
import type { JobEvent } from '../../client/waiters.js';
import type { PreparedQueryable } from '../../db/queryable.js';
import { TuskValidationError } from '../../errors.js';
import { selectTenantJob, selectTenantJobIds } from '../../queries/tenantJob.js';
import type { FlowSpec, Job } from '../../types.js';
import { parse } from '../../validation/validate.js';
import type { Api } from '../api.js';
import { scopedTenant } from '../auth.js';
import { CallerLimit, heldKey } from '../callerLimit.js';
import { type Endpoint, endpoint, type ResponseDoc } from '../endpoint.js';
import type { AppEnv } from '../env.js';
import { HttpError, inBody, notFound } from '../errors.js';
import { EventFeed, type EventRows, MAX_STREAMS_PER_CALLER, MAX_UNSENT_BATCHES } from '../events.js';
import {
  deletedSchema,
  enqueuedManySchema,
  enqueuedSchema,
  enqueueManySchema,
  enqueueOneSchema,
  errorSchema,
  type FlowNodeBody,
  flowIdsSchema,
  flowNodeBody,
  jobListSchema,
  jobQuery,
  jobSchema,
  listJobsQuery,
  parseFlow,
  retriedSchema,
  retryAllBody,
  stateSchema,
} from '../schemas.js';
import type { Principal } from '../tokens.js';
import { invalidDoc, jobNotFoundDoc, searchDocs, timeoutDoc } from './errorDocs.js';

/**
 * The job of `:id` if the caller may see it, else 404 (whether it exists or not). For a
 * tenant token the tenant is part of the query (see selectTenantJob). `db`: the pool to
 * ask, default the app's.
 */
const FINISHED = new Set(['succeeded', 'dead', 'cancelled', 'expired']);

export async function visibleJob(api: Api, c: Context<AppEnv>, db?: PreparedQueryable): Promise<Job> {
  const id = jobId(c.req.param('id'), 'id');
  const { tenant } = c.get('principal');
  const job =
    tenant === null
      ? await api.tusk.getJob(id)
      : await selectTenantJob(db ?? (await api.tusk.pool()), api.schema, id, tenant).then((r) => r && toJob(r));
  if (!job) throw notFound('job');
  return job;
}

/**
 * A tenant's token names only its tenant's jobs as dependencies: another tenant's job is
 * refused as a missing one is (400, the same words the database uses). Each id is looked
 * up once, on the searches' connections (with their statement timeout): a body of made-up
 * ids, which the history is searched for, holds up no other tenant's enqueues.
 */
async function tenantDependencies(
  api: Api,
  principal: Principal,
  jobs: ReadonlyArray<{ dependsOn?: ReadonlyArray<string | number> | undefined }>,
  field: (i: number) => string,
): Promise<void> {
  if (principal.tenant === null) return;
  const ids = [...new Set(jobs.flatMap((j) => (j.dependsOn ?? []).map(String)))];
  if (ids.length === 0) return;
  const mine = await selectTenantJobIds(await api.pools.reads(), api.schema, ids, principal.tenant);
  for (const [i, job] of jobs.entries()) {
    for (const [k, id] of (job.dependsOn ?? []).entries()) {
      if (!mine.has(String(id))) {
        throw new TuskValidationError(`${field(i)}.${k}`, `is not a job: no job has id ${id}`);
      }
    }
  }
}

/**
 * Closes the connection under a response, when the app runs in @hono/node-server (the
 * server of `listen`, or a user's), whose `c.env` has the Node response (`outgoing`).
 * Elsewhere there is none to reach: the response's end is all the app can do.
 */
function destroyConnection(env: unknown): void {
  const outgoing = (env as { outgoing?: unknown } | undefined)?.outgoing;
  // a Node response only: a mounted app's env may hold an `outgoing` of another kind
  if (outgoing instanceof ServerResponse || outgoing instanceof Http2ServerResponse) outgoing.destroy();
}

/** Long polls (`GET /api/jobs/:id?waitMs=`) one caller (one token) may hold at once. */
export const MAX_LONG_POLLS_PER_CALLER = 64;

export function jobEndpoints(api: Api): Endpoint[] {
  // one reader of job events for every stream of this server
  const feed = new EventFeed(api);
  const longPolls = new CallerLimit(MAX_LONG_POLLS_PER_CALLER, 'too_many_waits', 'long polls');
  /**
   * A change to the job of `:id`, which the caller must see (else 404): `act` answers, or
   * throws a 409 saying why not, or gives null when the job went in the meantime (404).
   */
  const onJob = (e: {
    method: 'post' | 'delete';
    path: string;
    summary: string;
    responses: Record<number, ResponseDoc>;
    act(job: Job): Promise<object | null>;
  }) =>
    endpoint({
      method: e.method,
      path: e.path,
      tag: 'jobs',
      access: 'manage',
      summary: e.summary,
      responses: { ...e.responses, 404: jobNotFoundDoc },
      async handle(c) {
        const answer = await e.act(await visibleJob(api, c));
        if (answer === null) throw notFound('job');
        return c.json(answer);
      },
    });
  return [
    endpoint({
      method: 'post',
      path: '/api/jobs',
      tag: 'jobs',
      access: 'enqueue',
      summary: 'Enqueue one job, or many with { jobs: [...] }',
      description:
        'Takes the options of enqueue; dates as ISO 8601 strings. A tenant token enqueues for its tenant (naming another is refused).',
      body: enqueueOneSchema.or(enqueueManySchema),
      batchBody: true,
      parseBody: (value) =>
        typeof value === 'object' && value !== null && 'jobs' in value
          ? parse(enqueueManySchema, value, 'body')
          : parse(enqueueOneSchema, value, 'body'),
      responses: {
        201: {
          description:
            'enqueued: { id, deduplicated } for one job, { ids } for many ({ ids, deduplicated } when an entry asks for deduplication or debounce)',
          schema: enqueuedSchema.or(enqueuedManySchema),
        },
        400: invalidDoc,
      },
      async handle(c, { body }) {
        const principal = c.get('principal');
        if ('jobs' in body) {
          const jobs = body.jobs.map((job, i) => ({
            ...job,
            tenant: scopedTenant(principal, job.tenant, `body.jobs.${i}.tenant`),
          }));
          await tenantDependencies(api, principal, jobs, (i) => `body.jobs.${i}.dependsOn`);
          return c.json(await inBody(() => api.tusk.enqueueMany(jobs)), 201);
        }
        const { task, payload, ...options } = body;
        const tenant = scopedTenant(principal, options.tenant, 'body.tenant');
        await tenantDependencies(api, principal, [options], () => 'body.dependsOn');
        return c.json(await inBody(() => api.tusk.enqueue(task, payload, { ...options, tenant })), 201);
      },
    }),
    endpoint({
      method: 'post',
      path: '/api/flows',
      tag: 'jobs',
      access: 'enqueue',
      summary: 'Enqueue a flow: a job and its children (it runs after them, with their results), in one transaction',
      description:
        'Each job takes the options of enqueue but deduplication and debounce, and `children` of the same shape. A tenant token enqueues for its tenant.',
      body: flowNodeBody,
      batchBody: true,
      parseBody: parseFlow,
      responses: {
        201: { description: 'the ids, in the shape of the flow', schema: flowIdsSchema },
        400: invalidDoc,
      },
      async handle(c, { body }) {
        const principal = c.get('principal');
        // the jobs with their paths, depth first (as parseFlow named them)
        const nodes: Array<[FlowNodeBody, string]> = [];
        for (const stack: Array<[FlowNodeBody, string]> = [[body as FlowNodeBody, 'body']]; stack.length > 0; ) {
          const [node, field] = stack.pop() as [FlowNodeBody, string];
          nodes.push([node, field]);
          node.tenant = scopedTenant(principal, node.tenant, `${field}.tenant`);
          for (const [i, child] of (node.children ?? []).entries()) stack.push([child, `${field}.children.${i}`]);
        }
        await tenantDependencies(
          api,
          principal,
          nodes.map(([node]) => node),
          (i) => `${nodes[i]?.[1]}.dependsOn`,
        );
        try {
          return c.json(await api.tusk.flow(body as FlowSpec), 201);
        } catch (error) {
          if (!(error instanceof TuskValidationError)) throw error;
          // flow.children[2].task → body.children.2.task
          const field = error.field.replace(/^flow/, 'body').replace(/\[(\d+)\]/g, '.$1');
          throw new TuskValidationError(field, error.message.slice(error.field.length + 2));
        }
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/jobs',
      tag: 'jobs',
      access: 'read',
      summary: 'List jobs, newest first, with filters and keyset paging',
      description: 'Runs under the statement timeout of lists and searches (503 past it), on connections of its own.',
      query: listJobsQuery,
      responses: { 200: { description: 'a page of jobs', schema: jobListSchema }, ...searchDocs },
      async handle(c, { query }) {
        const page = await jobPage(await api.pools.reads(), api.schema, {
          state: query.state ?? null,
          tenant: scopedTenant(c.get('principal'), query.tenant, 'query.tenant') ?? null,
          queue: query.queue ?? null,
          task: query.task ?? null,
          createdFrom: query.from ?? null,
          createdTo: query.to ?? null,
          before: query.cursor ?? null,
          limit: query.limit ?? 50,
        });
        return c.json(page);
      },
    }),
    endpoint({
      method: 'post',
      path: '/api/jobs/retry',
      tag: 'jobs',
      access: 'manage',
      summary: 'Run again every job in a state (default dead) matching the filter',
      description:
        'A search, then the jobs re-queued 10 000 at a time: it runs under the statement timeout of lists and searches (503 past it; the batches done before stay done).',
      body: retryAllBody,
      bodyOptional: true,
      responses: {
        200: { description: 'how many were re-queued', schema: retriedSchema },
        400: invalidDoc,
        503: timeoutDoc,
      },
      async handle(c, { body }) {
        const tenant = scopedTenant(c.get('principal'), body.tenant, 'body.tenant');
        // its search reads every matching job of the tenants: on the reads' pool, as a search
        return c.json({ retried: await (await api.pools.reader()).retryAll({ ...body, tenant }) });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/events',
      tag: 'jobs',
      access: 'read',
      summary:
        "Server-Sent Events: each job that finishes (event `finished`: id, tenant, queue, task, state) and each running job's progress as workers write it (event `progress`: id, tenant, queue, task, progress), the token's tenant's only",
      responses: {
        200: { description: 'an event stream', contentType: 'text/event-stream' },
        429: {
          description: `over the token's request rate, or a tenant token holding ${MAX_STREAMS_PER_CALLER} streams already (too_many_streams); either way, see Retry-After`,
          schema: errorSchema,
        },
      },
      async handle(c) {
        const principal = c.get('principal');
        const { tenant } = principal;
        const pending: Array<{ event: JobEvent; rows: EventRows }> = [];
        let ended = false;
        let wake = () => {};
        let abort = () => {};
        let close = () => {};
        // the stream ends at once, its slot and its batches let go, though a write to a
        // client that stopped reading may be waiting
        const end = () => {
          ended = true;
          pending.length = 0;
          close();
          abort();
          wake();
        };
        // refused (429) before the stream starts when the token holds too many
        close = await feed.open(heldKey(principal), {
          tenant,
          push(event, rows) {
            // a client that does not read its events: its stream ends rather than pile them up
            // here, and its connection with it, else held (and the write waiting on it) until
            // the client reads or leaves
            if (pending.length >= MAX_UNSENT_BATCHES) {
              end();
              destroyConnection(c.env);
            } else pending.push({ event, rows });
            wake();
          },
          end,
        });
        if (ended) close(); // ended while the feed was still subscribing
        return streamSSE(c, async (stream) => {
          abort = () => stream.abort();
          stream.onAbort(() => {
            close();
            wake();
          });
          if (ended) stream.abort();
          try {
            await stream.writeSSE({ event: 'ready', data: '{}' });
            while (!stream.aborted && !ended) {
              const batch = pending.shift();
              if (batch) {
                for (const job of batch.rows) {
                  await stream.writeSSE({ event: batch.event, id: job.id, data: JSON.stringify(job) });
                }
                continue;
              }
              // a comment now and then keeps proxies from closing an idle stream
              await new Promise<void>((resolve) => {
                const timer = setTimeout(resolve, 15_000);
                wake = () => {
                  clearTimeout(timer);
                  resolve();
                };
              });
              if (pending.length === 0 && !stream.aborted) await stream.write(': keep-alive\n\n');
            }
          } finally {
            close();
          }
        });
      },
    }),
    endpoint({
      method: 'get',
      path: '/api/jobs/:id',
      tag: 'jobs',
      access: 'read',
      summary: 'A job in any state: status, timings, stats, result, errors; with waitMs, once it is finished',
      query: jobQuery,
      responses: {
        200: { description: 'the job', schema: jobSchema },
        400: invalidDoc,
        404: jobNotFoundDoc,
        429: {
          description: `over the token's request rate, or a tenant token holding ${MAX_LONG_POLLS_PER_CALLER} long polls already (too_many_waits); either way, see Retry-After`,
          schema: errorSchema,
        },
      },
      async handle(c, { query }) {
        const job = await visibleJob(api, c);
        if (!query.waitMs || FINISHED.has(job.state)) return c.json(job);
        // held until the wait ends, even if the client went: each ends with a read
        const release = longPolls.take(heldKey(c.get('principal')));
        try {
          // one listening connection serves every long poll of the server
          return c.json((await api.tusk.waitFor(job.id, { timeoutMs: query.waitMs })) ?? job);
        } finally {
          release();
        }
      },
    }),
    onJob({
      method: 'post',
      path: '/api/jobs/:id/cancel',
      summary: 'Cancel a job (a running one is asked to stop: its state stays running until it does)',
      responses: { 200: { description: 'its state after the call', schema: stateSchema } },
      async act(job) {
        const state = await api.tusk.cancel(job.id);
        return state === null ? null : { state };
      },
    }),
    onJob({
      method: 'delete',
      path: '/api/jobs/:id',
      summary: 'Delete a job that waits to run or has finished, with its record',
      responses: {
        200: { description: 'deleted', schema: deletedSchema },
        409: { description: 'the job is running, or other jobs depend on it: cancel it', schema: errorSchema },
      },
      async act(job) {
        const outcome = await api.tusk.deleteJob(job.id);
        if (outcome === 'not_found') return null;
        if (outcome !== 'deleted') {
          const why = outcome === 'running' ? 'it is running' : 'other jobs depend on it';
          throw new HttpError(409, 'not_deletable', `job ${job.id} is not deleted: ${why}; cancel it instead`);
        }
        return { id: job.id, deleted: true as const };
      },
    }),
    onJob({
      method: 'post',
      path: '/api/jobs/:id/retry',
      summary: 'Run a dead, cancelled, expired or failed job again now (attempts reset, errors kept)',
      responses: {
        200: { description: 'queued again', schema: stateSchema },
        409: { description: 'the job is waiting, running or succeeded', schema: errorSchema },
      },
      async act(job) {
        const retried = await api.tusk.retry(job.id);
        if (retried === null) return null;
        if (!retried) {
          throw new HttpError(
            409,
            'not_retryable',
            `job ${job.id} is ${job.state}: only dead, cancelled, expired or failed jobs can be retried`,
          );
        }
        return { state: 'available' };
      },
    }),
  ];
}
