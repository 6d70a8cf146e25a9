import type { Context } from 'hono';
import type { z } from 'zod';
import { jobId } from '../../client/jobs.js';
import type { Tusk } from '../../tusk.js';
import type { Lease } from '../../types.js';
import type { Api } from '../api.js';
import { scopedTenant } from '../auth.js';
import { type Endpoint, endpoint, type ResponseDoc } from '../endpoint.js';
import type { AppEnv } from '../env.js';
import { inBody } from '../errors.js';
import {
  ackBody,
  errorSchema,
  extendBody,
  fetchBody,
  fetchedSchema,
  leaseUntilSchema,
  nackBody,
  okSchema,
  stateSchema,
} from '../schemas.js';
import { invalidDoc, jobNotFoundDoc } from './errorDocs.js';
import { visibleJob } from './jobs.js';

const leaseDocs = {
  400: invalidDoc,
  404: jobNotFoundDoc,
  409: {
    description: 'the lease is not held any more (ran out and leased again, or already acked)',
    schema: errorSchema,
  },
};

/** The lease `{ id, token }` of `:id`; a tenant's API token must own the job (else 404). */
async function lease(api: Api, c: Context<AppEnv>, token: string): Promise<Lease> {
  const id = jobId(c.req.param('id'), 'id');
  if (c.get('principal').tenant !== null) await visibleJob(api, c, await api.pools.leasePool());
  return { id, token };
}

/**
 * The queue API for workers in any language: fetch, ack, nack, extend. They run on
 * the server's lease pool, so that lists and searches, however many, never hold them up.
 */
export function leaseEndpoints(api: Api): Endpoint[] {
  /** `POST /api/jobs/:id/<verb>` on a held lease: the lease checked, then `act` on the lease pool answers. */
  const onLease = <B extends z.ZodType<{ token: string }>>(e: {
    verb: string;
    summary: string;
    body: B;
    ok: ResponseDoc;
    act(leases: Tusk, held: Lease, body: z.output<B>): Promise<object>;
  }) =>
    endpoint({
      method: 'post',
      path: `/api/jobs/:id/${e.verb}`,
      tag: 'workers anywhere',
      access: 'lease',
      summary: e.summary,
      body: e.body,
      responses: { 200: e.ok, ...leaseDocs },
      async handle(c, { body }) {
        const held = await lease(api, c, body.token);
        return c.json(await e.act(await api.pools.leases(), held, body));
      },
    });
  return [
    endpoint({
      method: 'post',
      path: '/api/fetch',
      tag: 'workers anywhere',
      access: 'lease',
      summary: 'Lease up to count jobs (GET); each stays running until acked, nacked or its lease runs out',
      body: fetchBody,
      bodyOptional: true,
      responses: { 200: { description: 'the leased jobs (maybe none)', schema: fetchedSchema }, 400: invalidDoc },
      async handle(c, { body }) {
        const tenant = scopedTenant(c.get('principal'), body.tenant, 'body.tenant');
        return c.json({ jobs: await (await api.pools.leases()).fetch({ ...body, tenant }) });
      },
    }),
    onLease({
      verb: 'ack',
      summary: 'Complete a leased job with its result (ACK)',
      body: ackBody,
      ok: { description: 'completed', schema: okSchema },
      async act(leases, held, body) {
        await inBody(() => leases.ack(held, body.result));
        return { ok: true };
      },
    }),
    onLease({
      verb: 'nack',
      summary: 'Give a leased job back after a failed attempt (NACK): retried after delayMs, or dead',
      body: nackBody,
      ok: { description: 'its state now', schema: stateSchema },
      async act(leases, held, { token: _, ...options }) {
        return { state: await inBody(() => leases.nack(held, options)) };
      },
    }),
    onLease({
      verb: 'extend',
      summary: 'Keep a leased job for leaseMs more from now (WORKING); says whether a cancel was asked for',
      body: extendBody,
      ok: { description: 'the new end of the lease, and whether the job is to be cancelled', schema: leaseUntilSchema },
      async act(leases, held, body) {
        // a consumer in another language has no signal: this is how it hears of a cancel
        return leases.working(held, body.leaseMs);
      },
    }),
  ];
}
