import type { Context } from 'hono';
import { jobId } from '../../client/jobs.js';
import type { Api } from '../api.js';
import { scopedTenant } from '../auth.js';
import { type Endpoint, endpoint } from '../endpoint.js';
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
import { invalidDoc, jobNotFoundDoc } from './docs.js';
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
async function lease(api: Api, c: Context<AppEnv>, token: string) {
  const id = jobId(c.req.param('id'), 'id');
  if (c.get('principal').tenant !== null) await visibleJob(api, c, await api.pools.leasePool());
  return { id, token };
}

/**
 * The queue API for workers in any language: fetch, ack, nack, extend. They run on
 * the server's lease pool, so that lists and searches, however many, never hold them up.
 */
export function leaseEndpoints(api: Api): Endpoint[] {
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
    endpoint({
      method: 'post',
      path: '/api/jobs/:id/ack',
      tag: 'workers anywhere',
      access: 'lease',
      summary: 'Complete a leased job with its result (ACK)',
      body: ackBody,
      responses: { 200: { description: 'completed', schema: okSchema }, ...leaseDocs },
      async handle(c, { body }) {
        const held = await lease(api, c, body.token);
        const leases = await api.pools.leases();
        await inBody(() => leases.ack(held, body.result));
        return c.json({ ok: true });
      },
    }),
    endpoint({
      method: 'post',
      path: '/api/jobs/:id/nack',
      tag: 'workers anywhere',
      access: 'lease',
      summary: 'Give a leased job back after a failed attempt (NACK): retried after delayMs, or dead',
      body: nackBody,
      responses: { 200: { description: 'its state now', schema: stateSchema }, ...leaseDocs },
      async handle(c, { body }) {
        const { token, ...options } = body;
        const held = await lease(api, c, token);
        const leases = await api.pools.leases();
        return c.json({ state: await inBody(() => leases.nack(held, options)) });
      },
    }),
    endpoint({
      method: 'post',
      path: '/api/jobs/:id/extend',
      tag: 'workers anywhere',
      access: 'lease',
      summary: 'Keep a leased job for leaseMs more from now (WORKING)',
      body: extendBody,
      responses: { 200: { description: 'the new end of the lease', schema: leaseUntilSchema }, ...leaseDocs },
      async handle(c, { body }) {
        const held = await lease(api, c, body.token);
        return c.json({ leaseUntil: await (await api.pools.leases()).extendLease(held, body.leaseMs) });
      },
    }),
  ];
}
