import { z } from 'zod';
import { retentionSchema } from '../client/retention.js';
import { rateSchema, WAIT_REASONS } from '../client/tenants.js';
import { TuskValidationError } from '../errors.js';
import { calendarValid } from '../validation/dates.js';
import {
  dependencyShape,
  describe,
  errorMessageSchema,
  flagSchema,
  ID_DIGITS,
  inBigintRange,
  integer,
  jobOptionShape,
  MAX_DEPENDENCIES,
  MAX_FLOW_DEPTH,
  MAX_NACK_DELAY_MS,
  nameSchema,
  parse,
  TOO_DEEP_FLOW,
} from '../validation/validate.js';
import { SCOPES } from './scopes.js';

// Requests. Validated with `parse` (errors name the field: `body.jobs.2.delayMs: ...`),
// and turned into the OpenAPI document, so the document is what the server checks.

const isoDate = z
  .string({ error: (issue) => `must be an ISO 8601 date-time string (got ${describe(issue.input)})` })
  .refine(
    (s) =>
      /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/.test(s) &&
      calendarValid(s) &&
      !Number.isNaN(Date.parse(s)),
    {
      error: (issue) =>
        `must be an ISO 8601 date-time with a time zone, e.g. 2030-01-01T09:00:00Z (got ${describe(issue.input)})`,
    },
  )
  .transform((s) => new Date(s))
  .meta({ format: 'date-time' });

const intParam = (min: number, max: number) =>
  z
    .string()
    .regex(/^-?\d+$/, 'must be an integer')
    .transform(Number)
    .refine((n) => n >= min && n <= max, `must be from ${min} to ${max}`)
    .meta({ description: `integer from ${min} to ${max}` });

const positiveInt = (max: number) =>
  z
    .number({ error: (issue) => `must be a number (got ${describe(issue.input)})` })
    .int('must be an integer')
    .min(1, 'must be at least 1')
    .max(max, `must be at most ${max}`);

export const jobIdSchema = z
  .string()
  .regex(ID_DIGITS, 'must be a job id: a positive integer')
  .refine(inBigintRange, 'must be a job id: a positive integer up to 9223372036854775807')
  .meta({ description: 'job id (a positive integer)' });
const jobStates = ['scheduled', 'available', 'running', 'failed', 'succeeded', 'dead', 'cancelled', 'expired'] as const;
export const jobStateSchema = z.enum(jobStates, { error: `must be one of ${jobStates.join(', ')}` });
const retryableState = z.enum(['dead', 'cancelled', 'expired', 'failed'], {
  error: 'must be dead, cancelled, expired or failed',
});

const dependsOnSchema = z
  .array(
    z.union([jobIdSchema, z.number().int().min(1).max(Number.MAX_SAFE_INTEGER)], {
      error: (issue) => `must be a job id: a positive integer, as a string or a number (got ${describe(issue.input)})`,
    }),
    { error: (issue) => `must be an array of job ids (got ${describe(issue.input)})` },
  )
  .max(MAX_DEPENDENCIES, `must list at most ${MAX_DEPENDENCIES} jobs`)
  .meta({
    description:
      'jobs this one waits for (of any queue; a tenant token: of its tenant): it runs once they have all succeeded',
  });
const onDependencyFailure = dependencyShape.onDependencyFailure.meta({
  description: "when one of them ends dead, cancelled or expired: 'cancel' this job (default) or 'continue'",
});

/** The fields of a job in a body beside its options: task, payload, times as ISO strings, dependencies. */
const jobBodyShape = {
  task: nameSchema(200),
  payload: z.unknown().optional(),
  runAt: isoDate.optional(),
  expiresAt: isoDate.optional(),
  dependsOn: dependsOnSchema.optional(),
  onDependencyFailure,
};
const oneStart = [
  (o: { runAt?: unknown; delayMs?: unknown }) => o.runAt === undefined || o.delayMs === undefined,
  { error: 'give runAt or delayMs, not both' },
] as const;

export const enqueueOneSchema = z
  .strictObject({ ...jobOptionShape, ...jobBodyShape })
  .refine(...oneStart)
  .meta({ description: 'One job: its task, payload, and the options of enqueue' });

/**
 * A job of a flow: enqueue's options but deduplication and debounce, and its children,
 * each of this same shape (checked one by one: see parseFlow).
 */
const { dedupe: _d, dedupKey: _k, dedupWindowMs: _w, debounce: _b, ...flowOptionShape } = jobOptionShape;
export const flowNodeBody = z
  .strictObject({
    ...flowOptionShape,
    ...jobBodyShape,
    children: z
      .array(z.record(z.string(), z.unknown()), {
        error: (issue) => `must be an array of jobs (got ${describe(issue.input)})`,
      })
      .optional()
      .meta({ description: 'the jobs this one waits for, enqueued with it: objects of this same shape' }),
  })
  .refine(...oneStart)
  .meta({ description: 'A job of a flow and its children (it runs after them), enqueued in one transaction' });

export type FlowNodeBody = Omit<z.output<typeof flowNodeBody>, 'children'> & { children?: FlowNodeBody[] };

/** A flow's body, checked node by node (without recursion: a chain may be deep), so that an error names the node's path. */
export function parseFlow(value: unknown): FlowNodeBody {
  let seen = 0;
  const node = (v: unknown, field: string): FlowNodeBody => {
    if (++seen > MAX_DEPENDENCIES) {
      throw new TuskValidationError(field, `is one job too many: a flow has at most ${MAX_DEPENDENCIES} jobs`);
    }
    return parse(flowNodeBody, v, field) as FlowNodeBody;
  };
  const root = node(value, 'body');
  const stack: Array<[FlowNodeBody, string, number]> = [[root, 'body', 1]];
  while (stack.length > 0) {
    const [parent, field, depth] = stack.pop() as [FlowNodeBody, string, number];
    parent.children = parent.children?.map((child, i) => {
      const at = `${field}.children.${i}`;
      if (depth >= MAX_FLOW_DEPTH) throw new TuskValidationError(at, TOO_DEEP_FLOW);
      const parsed = node(child, at);
      stack.push([parsed, at, depth + 1]);
      return parsed;
    });
  }
  return root;
}

export const flowIdsSchema = z
  .object({
    id: jobIdSchema,
    children: z.array(z.unknown()).meta({ description: 'the ids of its children, each { id, children }' }),
  })
  .meta({ description: 'the ids of the flow, in its shape' });

export const enqueueManySchema = z
  .strictObject({ jobs: z.array(enqueueOneSchema).min(1, 'must not be empty').max(10_000, 'at most 10 000 jobs') })
  .meta({ description: 'Many jobs, enqueued in one statement' });

export const listJobsQuery = z.strictObject({
  state: jobStateSchema.optional(),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
  task: nameSchema(200).optional(),
  from: isoDate.optional().meta({ description: 'created at or after (ISO 8601 with a zone)' }),
  to: isoDate.optional().meta({ description: 'created before (ISO 8601 with a zone)' }),
  cursor: jobIdSchema.optional().meta({ description: 'nextCursor of the previous page' }),
  limit: intParam(1, 500).optional().meta({ description: 'jobs per page, 1 to 500 (default 50)' }),
});

export const fetchBody = z.strictObject({
  queue: nameSchema(128).optional(),
  tenant: nameSchema(128).optional(),
  count: positiveInt(10_000).optional().meta({ description: 'most jobs to lease (default 1)' }),
  leaseMs: positiveInt(24 * 3600_000)
    .optional()
    .meta({ description: 'lease length (default 30 000)' }),
});

const token = z
  .string({ error: 'must be the token returned by fetch, a string of digits' })
  .regex(ID_DIGITS, { error: 'must be the token returned by fetch, a string of digits' })
  .refine(inBigintRange, 'must be the token returned by fetch: digits up to 9223372036854775807')
  .meta({ description: 'the lease: the token returned by fetch (a string of digits)', example: '42' });
export const ackBody = z.strictObject({ token, result: z.unknown().optional() });
export const nackBody = z.strictObject({
  token,
  delayMs: integer(0, MAX_NACK_DELAY_MS).optional().meta({ description: 'retry after this long (default at once)' }),
  error: errorMessageSchema.optional(),
});
export const extendBody = z.strictObject({ token, leaseMs: positiveInt(24 * 3600_000) });

export const retryAllBody = z.strictObject({
  state: retryableState.optional().meta({ description: 'default dead' }),
  task: nameSchema(200).optional(),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
});

const limit = integer(1, 1_000_000).nullable().optional();
export const tenantPatch = z.strictObject({
  slots: limit.meta({ description: 'jobs it may run at once; null: the default' }),
  perKey: limit.meta({ description: 'running jobs per concurrency key; null: no limit' }),
  paused: flagSchema().optional(),
  rate: rateSchema.meta({ description: 'at most limit job starts per window of perMs; null: no limit' }),
  retention: retentionSchema
    .optional()
    .meta({ description: "how long its finished jobs are kept, e.g. '30 days'; null: the default" }),
});

export const statsQuery = z.strictObject({
  windowMs: intParam(0, 366 * 24 * 3600_000)
    .optional()
    .meta({ description: 'finished jobs over (default 3 600 000)' }),
});

export const jobQuery = z.strictObject({
  waitMs: intParam(0, 60_000)
    .optional()
    .meta({ description: 'long poll: answer once the job is finished, or after this long (at most 60 000)' }),
});

export const timeseriesQuery = z.strictObject({
  minutes: intParam(1, 43_200).optional().meta({ description: 'window, up to 30 days (default 60)' }),
  bucketSeconds: intParam(10, 86_400).optional().meta({ description: 'bucket size (default 60)' }),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
});

export const tenantParam = nameSchema(128);
export const queueParam = nameSchema(128);
export const scheduleParam = nameSchema(200);

// Responses: documentation, and checked against real responses by the API tests.

const date = z.iso.datetime({ offset: true });
const nullableDate = date.nullable();
const ms = z.number().nullable();

const jobSource = z
  .object({ type: z.string(), id: z.string(), method: z.string().nullable() })
  .nullable()
  .meta({ description: 'the record the job is about: tusk.async() calls, or the source option of enqueue' });

const jobError = z.object({
  attempt: z.number(),
  message: z.string(),
  name: z.string().optional(),
  stack: z.string().optional(),
  at: z.string(),
});

export const jobSchema = z.object({
  id: jobIdSchema,
  task: z.string(),
  tenant: z.string(),
  queue: z.string(),
  state: jobStateSchema,
  payload: z.unknown(),
  priority: z.number(),
  attempts: z.number(),
  maxAttempts: z.number(),
  concurrencyKey: z.string().nullable(),
  createdAt: date,
  runAt: date,
  startedAt: nullableDate,
  finishedAt: nullableDate,
  expiresAt: nullableDate,
  waitMs: ms.meta({ description: 'from runAt to the start of the last attempt' }),
  runMs: ms.meta({ description: 'run time of the last attempt (finished jobs)' }),
  stats: z.record(z.string(), z.unknown()).nullable(),
  result: z.unknown(),
  error: jobError.nullable().meta({ description: 'the last failed attempt' }),
  errors: z.array(jobError).meta({ description: 'every failed attempt, oldest first' }),
  cancelRequested: z.boolean(),
  progress: z.unknown().meta({ description: 'what its handler last reported with ctx.progress(), or null' }),
  dependsOn: z.array(jobIdSchema).meta({ description: 'the jobs it depends on, in order' }),
  waitingOn: z.number().meta({ description: 'how many of them have not ended: while above 0 it waits (scheduled)' }),
  source: jobSource,
});

export const jobSummarySchema = z.object({
  id: jobIdSchema,
  task: z.string(),
  tenant: z.string(),
  queue: z.string(),
  state: jobStateSchema,
  priority: z.number(),
  attempts: z.number(),
  maxAttempts: z.number(),
  createdAt: date,
  runAt: date,
  startedAt: nullableDate,
  finishedAt: nullableDate,
  waitMs: ms,
  runMs: ms,
  error: z.string().nullable().meta({ description: "the last failed attempt's message" }),
});

export const jobListSchema = z.object({
  jobs: z.array(jobSummarySchema),
  nextCursor: jobIdSchema.nullable().meta({ description: 'pass as cursor for the next page; null on the last' }),
});

export const enqueuedSchema = z.object({ id: jobIdSchema, deduplicated: z.boolean() });
export const enqueuedManySchema = z.object({
  ids: z.array(jobIdSchema),
  deduplicated: z.array(z.boolean()).optional(),
});

export const leasedJobSchema = z.object({
  id: jobIdSchema,
  token: z.string().meta({ description: 'the lease: give it to ack, nack and extend' }),
  attempt: z.number(),
  task: z.string(),
  tenant: z.string(),
  queue: z.string(),
  payload: z.unknown(),
  priority: z.number(),
  maxAttempts: z.number(),
  createdAt: date,
  leaseUntil: date,
  dependsOn: z.array(jobIdSchema).meta({ description: 'the jobs it depends on: read their results at /api/jobs/{id}' }),
  source: jobSource,
});

export const fetchedSchema = z.object({ jobs: z.array(leasedJobSchema) });
export const stateSchema = z.object({ state: jobStateSchema });
export const deletedSchema = z.object({ id: jobIdSchema, deleted: z.literal(true) });
export const retriedSchema = z.object({ retried: z.number().meta({ description: 'jobs re-queued' }) });
export const okSchema = z.object({ ok: z.literal(true) });
export const leaseUntilSchema = z.object({
  leaseUntil: date,
  cancelRequested: z
    .boolean()
    .meta({ description: 'a cancel of the job was asked for: stop, and nack it (it then ends cancelled)' }),
});

export const tenantSchema = z.object({
  tenant: z.string(),
  slots: z.number().nullable().meta({ description: 'in effect (own or default); null: unlimited' }),
  ownSlots: z.number().nullable(),
  perKey: z.number().nullable(),
  paused: z.boolean(),
  running: z.number(),
  available: z.number(),
  scheduled: z.number(),
  retrying: z.number(),
  oldestWaitingMs: ms,
  lastServedAt: nullableDate,
  rate: z
    .object({ limit: z.number(), perMs: z.number() })
    .nullable()
    .meta({ description: 'at most limit job starts per window of perMs; null: no limit' }),
  retention: z.string().nullable().meta({ description: 'in effect (own or default); null: kept forever' }),
  ownRetention: z.string().nullable().meta({ description: 'set on this tenant; null: the default applies' }),
  waitReasons: z.array(z.enum(WAIT_REASONS)).meta({
    description:
      'why its jobs wait, in the order the claim checks: the tenant paused, some in paused queues, slots full, no starts left in the rate window, a free worker (nothing else holds them), scheduled or retrying jobs not due yet; empty when none waits',
  }),
  rateResetsAt: nullableDate.meta({ description: 'the end of the current rate window; null without a rate' }),
  nextRunAt: nullableDate.meta({ description: 'when its first scheduled or retrying job is due' }),
});
export const tenantListSchema = z.object({ tenants: z.array(tenantSchema) });

const countsSchema = z.object(
  Object.fromEntries(jobStates.map((s) => [s, z.number()])) as Record<(typeof jobStates)[number], z.ZodNumber>,
);
const groupStats = { counts: countsSchema, oldestWaitingMs: ms };
export const queueStatsSchema = z.object({ queue: z.string(), ...groupStats });
export const statsSchema = z.object({
  since: date.meta({ description: 'finished jobs are counted from then' }),
  tenants: z.array(z.object({ tenant: z.string(), slots: z.number().nullable(), paused: z.boolean(), ...groupStats })),
  queues: z.array(queueStatsSchema),
  tasks: z
    .array(z.object({ task: z.string(), ...groupStats }))
    .meta({ description: 'by task, across tenants and queues' }),
  total: z.object(groupStats),
});
export const queueListSchema = z.object({ since: date, queues: z.array(queueStatsSchema) });
export const queuePausedSchema = z.object({ queue: z.string(), paused: z.boolean(), changed: z.boolean() });
export const pausedQueuesSchema = z.object({ queues: z.array(z.object({ queue: z.string(), pausedAt: date })) });

export const recordedTaskListSchema = z.object({
  tasks: z.array(
    z.object({
      task: z.string(),
      tenant: z.string().nullable().meta({ description: "default tenant of its jobs (null: 'default')" }),
      queue: z.string().nullable().meta({ description: "default queue of its jobs (null: 'default')" }),
      maxAttempts: z.number().nullable(),
      backoff: z.union([z.literal(['exponential', 'function']), z.number()]).nullable(),
      retryQueue: z.string().nullable(),
      timeoutMs: z.number().nullable().meta({ description: 'time limit of an attempt (null: none)' }),
      isolated: z.boolean(),
      payloadSchema: z.record(z.string(), z.unknown()).nullable().meta({ description: 'JSON Schema of the payload' }),
      schemaMissing: z.string().nullable().meta({ description: 'why a task with a schema has no JSON Schema' }),
      recordedBy: z.string().meta({ description: 'the worker that recorded it' }),
      recordedAt: date,
    }),
  ),
});

export const scheduleSchema = z.object({
  name: z.string(),
  cron: z.string(),
  tz: z.string().meta({ description: 'the time zone its cron expression is read in' }),
  task: z.string(),
  payload: z.unknown(),
  tenant: z.string(),
  queue: z.string(),
  priority: z.number(),
  maxAttempts: z.number(),
  concurrencyKey: z.string().nullable(),
  backfill: z.number().meta({ description: 'missed ticks enqueued after downtime' }),
  source: z.enum(['api', 'crontab']).meta({ description: 'crontab: kept in sync with a crontab file' }),
  nextRunAt: nullableDate.meta({ description: 'the next tick not enqueued yet; null if none is left' }),
  lastRunAt: nullableDate.meta({ description: 'the last tick enqueued' }),
  lastJobId: jobIdSchema.nullable().meta({ description: "the last tick's job" }),
  pausedAt: nullableDate.meta({ description: 'when it was paused; null while it runs' }),
});
export const scheduleListSchema = z.object({ schedules: z.array(scheduleSchema) });
export const scheduleRemovedSchema = z.object({ name: z.string(), removed: z.literal(true) });

export const workerSchema = z.object({
  id: z.number(),
  name: z.string(),
  host: z.string(),
  pid: z.number(),
  queues: z.array(z.string()).nullable().meta({ description: 'null: all queues' }),
  concurrency: z.number(),
  version: z.string(),
  startedAt: date,
  heartbeatAt: date,
  alive: z.boolean().meta({ description: 'its process and connection are up' }),
  jobs: z.number().meta({ description: 'jobs it holds (running or claimed ahead)' }),
});
export const workerListSchema = z.object({ workers: z.array(workerSchema) });

export const timeseriesSchema = z.object({
  bucketSeconds: z.number(),
  buckets: z.array(
    z.object({
      t: date.meta({ description: 'start of the bucket' }),
      enqueued: z.number(),
      succeeded: z.number(),
      dead: z.number(),
      other: z.number().meta({ description: 'cancelled or expired' }),
      waitP50: ms,
      waitP95: ms,
      runP50: ms,
      runP95: ms,
    }),
  ),
});

export const whoamiSchema = z.object({
  role: z.enum(['admin', 'tenant', 'scoped']).meta({
    description: 'admin; tenant: a token of one tenant; scoped: a token of every tenant, without admin',
  }),
  tenant: z.string().nullable().meta({ description: 'whose jobs it sees; null: every tenant’s' }),
  scopes: z.array(z.enum(SCOPES)).meta({ description: 'what it may do' }),
  auth: z.boolean().meta({ description: 'false: the server asks no token (loopback only)' }),
});
export const healthSchema = z.object({ ok: z.literal(true), version: z.string() });
export const errorSchema = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    field: z.string().optional().meta({ description: 'the offending field, e.g. body.jobs.2.delayMs' }),
  }),
});
