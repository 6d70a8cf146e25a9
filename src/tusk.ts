import type pg from 'pg';
import { z } from 'zod';
import { hasDedup, hasDependencies, isDelayed, type JobRecord, jobRecord } from './client/entries.js';
import { jobId, toClaimed, toJob } from './client/jobs.js';
import { Queues } from './client/queues.js';
import { type ScheduleInfo, Schedules } from './client/schedules.js';
import { collectStats, type Stats } from './client/stats.js';
import { Tenants } from './client/tenants.js';
import { Waiters } from './client/waiters.js';
import { COPY_MIN_JOBS, copyRecordSlices, jsonArray, plainEntry, type Written, writeRecords } from './client/write.js';
import { type TransactionLike, toQueryable } from './db/adapters.js';
import { type ConnectionOptions, type Database, openDatabase } from './db/connection.js';
import type { EmbeddedOptions } from './db/embedded.js';
import type { Queryable } from './db/queryable.js';
import { validateSchemaName } from './db/schema.js';
import { Drainer, type DrainerHost, type DrainerOptions } from './drain/drainer.js';
import { LeaseLostError, SQLSTATE, TuskError, TuskSchemaError, TuskValidationError } from './errors.js';
import { createLogger, type Logger } from './log.js';
import { type MigrateResult, migrate } from './migrate/migrate.js';
import { cancelJob } from './queries/cancelJob.js';
import { type DeleteOutcome, deleteJobs } from './queries/deleteJobs.js';
import { maintainHistory, type PruneBatch, selectFinishedJobs } from './queries/history.js';
import { insertJob, insertJobsDedup, insertJobsFlow } from './queries/insertJobs.js';
import { ackJob, fetchJobs, leaseState, type NackOutcome, nackJob, working } from './queries/leases.js';
import { retryJobs, selectRetryable } from './queries/retryJobs.js';
import { selectJob } from './queries/selectJob.js';
import { countStaged, stageJobs } from './queries/staged.js';
import { type RecordedDefinition, recordedDefinitions } from './queries/taskDefinitions.js';
import type { ScheduleOptions } from './schedules/options.js';
import { type AsyncCalls, type AsyncOptions, asyncCalls } from './tasks/async.js';
import type {
  EnqueueArgs,
  TaskList,
  TaskName,
  TaskPayload,
  TypedFlowSpec,
  TypedJob,
  TypedJobSpec,
} from './tasks/define.js';
import { type TaskDefinition, type Tasks, taskMap, tasksSchema } from './tasks/definition.js';
import { RecordedTasks } from './tasks/recorded.js';
import { validateRecord } from './tasks/schema.js';
import { type SourceOptions, SourceRegistry } from './tasks/sources.js';
import type {
  Enqueued,
  EnqueueOptions,
  FlowIds,
  FlowSpec,
  Job,
  JobSpec,
  JobState,
  Lease,
  LeasedJob,
  StageOptions,
  StageSpec,
} from './types.js';
import { Upkeep, type UpkeepOptions } from './upkeep/upkeep.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES_LIMIT, toJson } from './validation/json.js';
import {
  clientSchema,
  dateSchema,
  describe,
  enqueueOptionsSchema,
  errorMessageSchema,
  flowNodeSchema,
  ID_DIGITS,
  inBigintRange,
  integer,
  jobSpecSchema,
  MAX_DELAY_MS,
  MAX_DEPENDENCIES,
  MAX_FLOW_DEPTH,
  MAX_NACK_DELAY_MS,
  nameSchema,
  parse,
  stageOptionsSchema,
  stageSpecSchema,
  TOO_DEEP_FLOW,
} from './validation/validate.js';
import type { WorkerOptions } from './worker/options.js';
import { Worker, type WorkerHost } from './worker/worker.js';

/** Options of `new Tusk()`; `L` is the list of typed tasks given as `tasks`, if any. */
export interface TuskOptions<L extends TaskList = TaskList> {
  /** `postgres://...`. Default `DATABASE_URL`; with neither (and no pool), an embedded server. */
  connectionString?: string;
  /**
   * Use this pool instead of creating one (Tusk will not end it). Until `close()`, Tusk
   * listens to its errors and to those of each client it creates, so that a connection
   * that fails is logged (debug for a client in use) and fails its query rather than
   * ending the process with an unheard `error` event.
   */
  pool?: pg.Pool;
  /** Schema holding Tusk's tables. Default `TUSK_SCHEMA` or `tusk`. */
  schema?: string;
  /** pino (or a logger of the same shape); `false` for none. Default: pino on stderr. */
  logger?: Logger | false;
  /** Largest payload or result, as JSON. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Size of the pool Tusk creates. Default 10. */
  maxConnections?: number;
  /** Where the embedded server keeps its data when no URL is given. */
  embedded?: EmbeddedOptions;
  /**
   * Task definitions: their `tenant`, `queue` and `retry` are the defaults of their jobs,
   * their `schema` validates payloads, and workers of this instance run their handlers
   * unless given other tasks. A list of tasks made by `defineTask` makes `enqueue` typed.
   */
  tasks?: L | Tasks;
}

const optionsSchema = z.strictObject({
  connectionString: z.string().min(1).optional(),
  pool: z.custom<pg.Pool>((p) => typeof (p as pg.Pool)?.connect === 'function', 'must be a pg Pool').optional(),
  schema: z.string().optional(),
  logger: z.union([z.literal(false), z.custom<Logger>((l) => typeof (l as Logger)?.info === 'function')]).optional(),
  maxPayloadBytes: integer(1024, MAX_PAYLOAD_BYTES_LIMIT).optional(),
  maxConnections: integer(2, 1000).optional(),
  embedded: z
    .strictObject({
      dir: z.string().optional(),
      port: z.number().int().optional(),
      settings: z.record(z.string(), z.string()).optional(),
    })
    .optional(),
  tasks: tasksSchema.optional(),
});

const enqueueManyOptionsSchema = z.strictObject({ client: clientSchema.optional() });
const leaseMsSchema = integer(1, 24 * 3600_000);
const fetchOptionsSchema = z.strictObject({
  queue: nameSchema(128).optional(),
  tenant: nameSchema(128).optional(),
  count: integer(1, 10_000).optional(),
  leaseMs: leaseMsSchema.optional(),
});
const leaseSchema = z
  .strictObject(
    {
      id: z.string().regex(ID_DIGITS).refine(inBigintRange, 'must be a job id up to 9223372036854775807'),
      token: z.string().regex(ID_DIGITS).refine(inBigintRange, 'must be a token up to 9223372036854775807'),
    },
    {
      error: 'must be the leased job returned by fetch, or { id, token }: the token tells this lease from any other',
    },
  )
  .loose();
const waitOptionsSchema = z.strictObject({ timeoutMs: integer(0, 24 * 3600_000).optional() });
const upkeepOptionsSchema = z.strictObject({
  everyMs: integer(1, 600_000).optional(),
  historyEveryMs: integer(1, 24 * 3600_000).optional(),
});
const nackOptionsSchema = z.strictObject({
  delayMs: integer(0, MAX_NACK_DELAY_MS).optional(),
  error: errorMessageSchema.optional(),
});
const pruneOptionsSchema = z.strictObject({
  batch: integer(1, 1_000_000).optional(),
  onProgress: z.custom<(batch: PruneBatch) => void>((f) => typeof f === 'function', 'must be a function').optional(),
});
/** A Date, or the last job of the previous page: any object with a job's id and finishedAt (a Job). */
const pageEndSchema = z.custom<Date | { id: string; finishedAt: Date }>(
  (v) => {
    if (v instanceof Date) return dateSchema.safeParse(v).success;
    if (typeof v !== 'object' || v === null) return false;
    const { id, finishedAt } = v as { id?: unknown; finishedAt?: unknown };
    try {
      jobId(id);
    } catch {
      return false;
    }
    return dateSchema.safeParse(finishedAt).success;
  },
  {
    error: (issue) =>
      `must be a valid Date, or the last job of the previous page (an object with its id and finishedAt) (got ${describe(issue.input)})`,
  },
);
const finishedJobsSchema = z.strictObject({
  tenant: nameSchema(128),
  limit: integer(1, 10_000).optional(),
  before: pageEndSchema.optional(),
});
const retryAllSchema = z.strictObject({
  state: z.enum(['dead', 'cancelled', 'expired', 'failed']).optional(),
  task: nameSchema(200).optional(),
  tenant: nameSchema(128).optional(),
  queue: nameSchema(128).optional(),
});
const statsOptionsSchema = z.strictObject({ windowMs: integer(0, MAX_DELAY_MS).optional() });

/**
 * A Tusk instance: the producer API (enqueue, getJob, cancel) and the factory of workers.
 * Connects lazily on first use; `close()` when done.
 *
 * @example
 * const tusk = new Tusk({ connectionString: process.env.DATABASE_URL });
 * await tusk.migrate();
 * const { id } = await tusk.enqueue('send_email', { to: 'a@example.com' }, { tenant: 'acme' });
 * console.log(await tusk.getJob(id));
 * await tusk.close();
 *
 * With a list of tasks made by `defineTask` (`new Tusk({ tasks: [sendEmail] })`, or the
 * type `Tusk<typeof tasks>`), enqueue checks task names and payloads at compile time;
 * `tusk.untyped` enqueues any task name with any payload.
 */
export class Tusk<L extends TaskList = TaskList> {
  /** The schema holding Tusk's tables. */
  readonly schema: string;
  /** Per-tenant slots, concurrency-key limits, rate limits, retention and pausing. */
  readonly tenants: Tenants;
  /** Pausing and resuming queues (see Queues). */
  readonly queues: Queues;
  /** Recurring jobs (cron expressions). */
  readonly schedules: Schedules;
  readonly #log: Logger;
  readonly #connection: ConnectionOptions;
  readonly #maxPayloadBytes: number;
  readonly #tasks: Map<string, TaskDefinition>;
  readonly #sources = new SourceRegistry();
  #db: Promise<Database> | null = null;
  #closed = false;
  readonly #workers = new Set<Worker>();
  readonly #drainers = new Set<Drainer>();
  readonly #upkeeps = new Set<Upkeep>();
  #waiters: Waiters<Job> | null = null;
  // a schema migrated before definitions were recorded has none (or there is no schema yet,
  // which the enqueue then says); a role created before then may not read them (`tusk roles
  // create` again grants it): enqueues go on without them
  readonly #recorded = new RecordedTasks(async () =>
    recordedDefinitions(await this.pool(), this.schema).catch((error) => {
      const code = (error as { code?: string }).code;
      if (code !== SQLSTATE.undefinedTable && code !== SQLSTATE.insufficientPrivilege) throw error;
      const what = 'the task definitions workers recorded cannot be read: enqueues do without';
      if (code === SQLSTATE.undefinedTable) this.#log.debug({ err: error }, what);
      else this.#log.warn({ reason: (error as Error).message }, what);
      return [];
    }),
  );

  constructor(options: TuskOptions<L> = {}) {
    const o = parse(optionsSchema, options, 'Tusk options') as TuskOptions;
    this.schema = validateSchemaName(o.schema ?? process.env.TUSK_SCHEMA ?? 'tusk');
    this.#log = createLogger(o.logger);
    this.#maxPayloadBytes = o.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.#tasks = taskMap(o.tasks as Tasks | undefined);
    this.#connection = {
      connectionString: o.connectionString,
      pool: o.pool,
      embedded: o.embedded,
      maxConnections: o.maxConnections,
    };
    this.tenants = new Tenants(() => this.pool(), this.schema);
    this.queues = new Queues(() => this.pool(), this.schema);
    this.schedules = new Schedules({
      db: () => this.pool(),
      schema: this.schema,
      tasks: this.#tasks,
      maxPayloadBytes: this.#maxPayloadBytes,
    });
  }

  /**
   * The logger this instance writes to: the `logger` option, pino on stderr by default, or
   * one that drops every line (`logger: false`). The HTTP server logs through it; so may you.
   *
   * @example
   * tusk.logger.info({ port }, 'billing: listening');
   */
  get logger(): Logger {
    return this.#log;
  }

  /**
   * The largest payload or result this instance accepts, in bytes of JSON (the
   * `maxPayloadBytes` option, default 1 MiB). The HTTP server sizes its request bodies by it.
   *
   * @example
   * if (Buffer.byteLength(JSON.stringify(report)) > tusk.maxPayloadBytes) await store(report);
   */
  get maxPayloadBytes(): number {
    return this.#maxPayloadBytes;
  }

  /** The connection pool (connecting, or starting the embedded server, on first call). */
  async pool(): Promise<pg.Pool> {
    return (await this.#database()).pool;
  }

  /** The connection string in use (the embedded server's when there was none). */
  async connectionString(): Promise<string | undefined> {
    return (await this.#database()).clientConfig.connectionString;
  }

  #database(): Promise<Database> {
    if (this.#closed) return Promise.reject(new TuskError('this Tusk instance is closed'));
    this.#db ??= openDatabase(this.#connection, this.#log).catch((error) => {
      this.#db = null;
      throw error;
    });
    return this.#db;
  }

  /**
   * Creates or upgrades Tusk's schema. Safe to run from many processes at once.
   * Throws TuskSchemaError if the database was migrated by a newer Tusk, or left by a
   * development build at a version before the baseline (30).
   *
   * @example
   * const { applied } = await tusk.migrate(); // at deploy, or at each process's start
   */
  async migrate(): Promise<MigrateResult> {
    return migrate(await this.pool(), this.schema);
  }

  /**
   * Adds a job; returns its id. With `client`, the job is written through your connection,
   * inside your transaction: it commits or rolls back with it. A task with a `schema` has
   * its payload validated first (TuskValidationError listing the bad fields).
   *
   * With `dependsOn`, the job waits until the jobs it names have ended (see EnqueueOptions).
   *
   * @example
   * const { id } = await tusk.enqueue('resize', { url }, { tenant: 'acme', delayMs: 5000 });
   * await tusk.enqueue('publish', { url }, { dependsOn: [id] }); // runs once the resize succeeded
   */
  enqueue<N extends TaskName<L>>(task: N, ...args: EnqueueArgs<TaskPayload<L, N>>): Promise<Enqueued>;
  async enqueue(task: string, ...[payload, options = {}]: [unknown?, EnqueueOptions?]): Promise<Enqueued> {
    const name = parse(nameSchema(200), task, 'task');
    const opts = parse(enqueueOptionsSchema, options, 'options') as EnqueueOptions;
    const definition = (await this.#definitions([name]))(name);
    const record = jobRecord(name, payload, opts, 'payload', this.#maxPayloadBytes, definition, 'options.dependsOn');
    if (definition?.schema) await validateRecord(definition.schema, record, 'payload');
    const client = opts.client && toQueryable(opts.client);
    if (hasDependencies(record)) {
      const [id] = await this.#write(client, (db) => insertJobsFlow(db, this.schema, jsonArray([record])));
      return { id: id as string, deduplicated: false };
    }
    if (hasDedup(record)) {
      const [row] = await this.#write(client, (db) => insertJobsDedup(db, this.schema, jsonArray([record])));
      return { id: row?.id as string, deduplicated: row?.deduplicated ?? false };
    }
    const id = await this.#write(client, (db) => insertJob(db, this.schema, record));
    return { id, deduplicated: false };
  }

  /**
   * Adds many jobs at once; returns their ids in input order. Each entry takes the
   * options of `enqueue` (but `client`, given once for all in `options`). One statement
   * and one NOTIFY per call; big batches (500+ jobs without delays or deduplication, on a
   * `pg` connection) use COPY, about twice as fast, and without `client` or payload
   * schemas are checked while they are written (nothing is written if an entry fails).
   * With deduplication asked for any entry, `deduplicated[i]` says whether entry i
   * matched an existing job (such a batch is still one statement, which writes its entries one
   * at a time, in the order of their keys). Entries may
   * have `dependsOn`, of jobs enqueued before this call (for jobs that depend on each
   * other, see `flow`); then none of them may be deduplicated or debounced.
   *
   * @example
   * const { ids } = await tusk.enqueueMany(users.map((u) => ({ task: 'welcome', payload: { id: u.id } })));
   */
  enqueueMany(jobs: ReadonlyArray<TypedJobSpec<L>>, options?: { client?: TransactionLike }): Promise<Written>;
  async enqueueMany(jobs: readonly JobSpec[], options: { client?: TransactionLike } = {}): Promise<Written> {
    const { client } = parse(enqueueManyOptionsSchema, options, 'options');
    // a big batch of plain jobs on Tusk's own connections: checked slice by slice while the
    // slices before are being written, so that the checks and the insert overlap (the COPY
    // inserts nothing if an entry fails them, and the error is the same)
    if (!client && Array.isArray(jobs) && jobs.length >= COPY_MIN_JOBS) {
      // read once: a caller changing the array meanwhile changes nothing written
      const list = Array.from(jobs); // holes as undefined, which the general path refuses
      if (list.every(plainEntry)) {
        const written = await this.#copyMany(list);
        if (written) return written;
      }
    }
    const records = await this.#records(jobs, 'jobs', jobSpecSchema);
    if (records.length === 0) return { ids: [] };
    if (records.some(hasDependencies)) {
      const i = records.findIndex(hasDedup);
      if (i >= 0) {
        throw new TuskValidationError(
          `jobs[${i}]`,
          'is deduplicated or debounced, and other entries have dependencies (dependsOn): enqueue them in separate calls',
        );
      }
    }
    return this.#write(client && toQueryable(client), (db) => writeRecords(db, this.schema, records));
  }

  /** Validated records of enqueueMany's or stageMany's entries (payload schemas included). */
  async #records(
    jobs: readonly JobSpec[],
    field: string,
    schema: typeof jobSpecSchema | typeof stageSpecSchema,
  ): Promise<JobRecord[]> {
    if (!Array.isArray(jobs)) throw new TuskValidationError(field, `must be an array (got ${describe(jobs)})`);
    // Array.from visits holes (as undefined), which map would skip
    const definition = await this.#definitions(Array.from(jobs, (job) => (job as Partial<JobSpec> | undefined)?.task));
    const records = Array.from(jobs, (job, i) => this.#record(job, `${field}[${i}]`, schema, definition));
    await this.#validatePayloads(records, (i) => `${field}[${i}].payload`, definition);
    return records;
  }

  /** One entry's record, checked but for its payload's schema; `at` names it in errors. */
  #record(
    job: JobSpec | undefined,
    at: string,
    schema: typeof jobSpecSchema | typeof stageSpecSchema,
    definition: (task: string) => TaskDefinition | undefined,
  ): JobRecord {
    const spec = parse(schema, job, at) as JobSpec;
    return jobRecord(
      spec.task,
      spec.payload,
      spec,
      `${at}.payload`,
      this.#maxPayloadBytes,
      definition(spec.task),
      `${at}.dependsOn`,
    );
  }

  /**
   * enqueueMany's big plain batches: written by COPY as they are checked, a slice at a
   * time. Only our own checks run while the COPY holds its connection and its statement:
   * a batch of a task with a payload schema (the caller's code, maybe slow, maybe async,
   * maybe reading through this Tusk: with the pool's connections all held by such COPYs,
   * it would wait for one forever) takes the general path, which checks everything before
   * it takes a connection. Null for the general path, which then checks the batch again
   * and writes it: a schema, or an entry that turns out to need it after all.
   */
  async #copyMany(jobs: readonly JobSpec[]): Promise<Written | null> {
    const definition = await this.#definitions(jobs.map((job) => job.task));
    if (jobs.some((job) => typeof job.task === 'string' && definition(job.task)?.schema)) return null;
    const slice = (from: number) => {
      const records = jobs
        .slice(from, from + COPY_SLICE)
        .map((job, k) => this.#record(job, `jobs[${from + k}]`, jobSpecSchema, definition));
      if (records.some((r) => hasDedup(r) || hasDependencies(r) || isDelayed(r))) throw new NotPlain();
      return records;
    };
    try {
      // the first slice before a connection is taken: a bad entry there costs no round trip
      const first = slice(0);
      const slices = function* () {
        yield first;
        for (let from = COPY_SLICE; from < jobs.length; from += COPY_SLICE) yield slice(from);
      };
      const pool = await this.pool();
      return await this.#write(pool, () => copyRecordSlices(pool, this.schema, jobs.length, slices()));
    } catch (error) {
      if (error instanceof NotPlain) return null;
      // the general path checks every entry before it writes: a bad entry is what it
      // reports, rather than the database's error (down, schema missing) met first here
      if (!(error instanceof TuskValidationError)) await this.#records(jobs, 'jobs', jobSpecSchema);
      throw error;
    }
  }

  /** Checks the payloads of tasks with a schema, after every record passed the other checks (none is left unawaited). */
  async #validatePayloads(
    records: readonly JobRecord[],
    field: (i: number) => string,
    definition: (task: string) => TaskDefinition | undefined,
  ): Promise<void> {
    await Promise.all(
      records.map((r, i) => {
        const schema = definition(r.task)?.schema;
        return schema && validateRecord(schema, r, field(i));
      }),
    );
  }

  /**
   * Enqueues a tree of jobs in one transaction: each job waits for its `children`
   * (enqueued with it) and runs once they have all succeeded, reading their results with
   * `ctx.dependencies()` — the parent after its children, as in BullMQ's FlowProducer.
   * Every job takes enqueue's options but deduplication and debounce (tenant, queue,
   * delays, `dependsOn` of jobs that exist already, `onDependencyFailure`...); its
   * dependencies are its `dependsOn`, then its children, in order. A child that ends
   * `dead`, `cancelled` or `expired` cancels its parent, and so on up, unless the parent
   * says `onDependencyFailure: 'continue'`. Returns the ids, in the same tree. With
   * `client`, written in your transaction. At most 10 000 jobs, 500 levels deep.
   *
   * @example
   * const { id, children } = await tusk.flow({
   *   task: 'assemble', payload: { doc: 7 }, queue: 'light',
   *   children: pages.map((page) => ({ task: 'render', payload: { doc: 7, page }, queue: 'heavy' })),
   * });
   * // assemble's handler: async ({ doc }, ctx) => join((await ctx.dependencies()).map((job) => job.result))
   */
  flow(root: TypedFlowSpec<L>, options?: { client?: TransactionLike }): Promise<FlowIds>;
  async flow(root: FlowSpec, options: { client?: TransactionLike } = {}): Promise<FlowIds> {
    const { client } = parse(enqueueManyOptionsSchema, options, 'options');
    type Frame = { spec: FlowSpec; field: string; next: number; children: number[] };
    let seen = 0;
    const frame = (value: unknown, field: string): Frame => {
      if (++seen > MAX_DEPENDENCIES) {
        throw new TuskValidationError(field, `is one job too many: a flow has at most ${MAX_DEPENDENCIES} jobs`);
      }
      return { spec: parse(flowNodeSchema, value, field) as FlowSpec, field, next: 0, children: [] };
    };
    // in post-order (a job's children are written before it), without recursion: a chain may be deep
    const records: JobRecord[] = [];
    const fields: string[] = [];
    const childrenOf: number[][] = [];
    const definition = await this.#definitions(null); // the tasks are known only on the walk
    const stack = [frame(root, 'flow')];
    while (stack.length > 0) {
      const top = stack.at(-1) as Frame;
      const kids = top.spec.children ?? [];
      if (top.next < kids.length) {
        const i = top.next++;
        const field = `${top.field}.children[${i}]`;
        if (stack.length >= MAX_FLOW_DEPTH) throw new TuskValidationError(field, TOO_DEEP_FLOW);
        stack.push(frame(kids[i], field));
        continue;
      }
      stack.pop();
      const { spec, field, children } = top;
      if (spec.onDependencyFailure !== undefined && children.length === 0 && !spec.dependsOn?.length) {
        throw new TuskValidationError(
          `${field}.onDependencyFailure`,
          'is for a job with dependencies: give it children or dependsOn',
        );
      }
      const record = jobRecord(
        spec.task,
        spec.payload,
        spec,
        `${field}.payload`,
        this.#maxPayloadBytes,
        definition(spec.task),
        `${field}.dependsOn`,
      );
      if (children.length > 0) record.after = children;
      records.push(record);
      fields.push(field);
      childrenOf.push(children);
      stack.at(-1)?.children.push(records.length - 1);
    }
    await this.#validatePayloads(records, (i) => `${fields[i]}.payload`, definition);
    const ids = await this.#write(client && toQueryable(client), (db) =>
      insertJobsFlow(db, this.schema, jsonArray(records)),
    );
    // children come before their parent: each node's are made when it is
    const tree: FlowIds[] = [];
    for (const [i, children] of childrenOf.entries()) {
      tree.push({ id: ids[i] as string, children: children.map((c) => tree[c] as FlowIds) });
    }
    return tree.at(-1) as FlowIds;
  }

  /**
   * Stages a job inside your transaction: the row is written through `tx`, so
   * it exists only if your transaction commits, and a drainer (`tusk.drainer()`,
   * `tusk drain`) forwards it to a sink (Tusk's own queue, BullMQ, or yours) at least
   * once. `tx` is any connection `enqueue`'s `client` takes. Returns the staged row's id.
   *
   * @example
   * await db.transaction().execute(async (trx) => {
   *   await trx.insertInto('orders').values(order).execute();
   *   await tusk.stage(trx, 'ship', { orderId: order.id }, { tenant: 'acme' });
   * });
   */
  async stage(
    tx: TransactionLike,
    task: string,
    payload?: unknown,
    options: StageOptions = {},
  ): Promise<{ id: string }> {
    const db = toQueryable(tx, 'tx');
    const name = parse(nameSchema(200), task, 'task');
    const opts = parse(stageOptionsSchema, options, 'options') as StageOptions;
    const definition = (await this.#definitions([name]))(name);
    const record = jobRecord(name, payload, opts, 'payload', this.#maxPayloadBytes, definition);
    if (definition?.schema) await validateRecord(definition.schema, record, 'payload');
    const [id] = await this.#write(db, (q) => stageJobs(q, this.schema, jsonArray([record])));
    return { id: id as string };
  }

  /**
   * Stages many jobs in one statement inside your transaction; ids in input order.
   *
   * @example
   * await tusk.stageMany(tx, orders.map((o) => ({ task: 'invoice', payload: { order: o.id } })));
   */
  async stageMany(tx: TransactionLike, jobs: readonly StageSpec[]): Promise<{ ids: string[] }> {
    const db = toQueryable(tx, 'tx');
    const records = await this.#records(jobs, 'jobs', stageSpecSchema);
    if (records.length === 0) return { ids: [] };
    return { ids: await this.#write(db, (q) => stageJobs(q, this.schema, jsonArray(records))) };
  }

  /**
   * How many staged jobs wait for the drainer.
   *
   * @example
   * if ((await tusk.stagedCount()) > 100_000) log.warn('the drainer is behind');
   */
  async stagedCount(): Promise<number> {
    return this.#write(undefined, (db) => countStaged(db, this.schema));
  }

  /**
   * A drainer forwarding staged jobs to `sink`: `'tusk'` (this queue, exactly once) or a
   * Sink such as `bullmqSink()` (at least once). One drainer per schema is active at a
   * time; others wait and take over when it stops or dies. Call `start()` on it.
   *
   * @example
   * const drainer = tusk.drainer({ sink: bullmqSink({ connection: 'redis://127.0.0.1:6379' }) });
   * await drainer.start();
   */
  drainer(options: DrainerOptions): Drainer {
    if (this.#closed) throw new TuskError('this Tusk instance is closed');
    const host: DrainerHost = {
      schema: this.schema,
      log: this.#log,
      database: () => this.#database(),
      forget: (d) => this.#drainers.delete(d),
    };
    const drainer = new Drainer(host, options);
    this.#drainers.add(drainer);
    return drainer;
  }

  /**
   * Leases up to `count` jobs for a worker outside this process (GET): they are
   * `running` until `ack`ed or `nack`ed, or until the lease runs out — then they go back to
   * the queue (the attempt counts). Same fairness and slots as workers.
   *
   * @example
   * const [job] = await tusk.fetch({ queue: 'reports', leaseMs: 60_000 });
   * if (job) await tusk.ack(job, await render(job.payload));
   */
  async fetch(
    options: { queue?: string; tenant?: string; count?: number; leaseMs?: number } = {},
  ): Promise<LeasedJob[]> {
    const o = parse(fetchOptionsSchema, options, 'options');
    const rows = await this.#write(undefined, (db) =>
      fetchJobs(db, this.schema, {
        count: o.count ?? 1,
        leaseMs: o.leaseMs ?? 30_000,
        queue: o.queue ?? null,
        tenant: o.tenant ?? null,
      }),
    );
    // Object.assign, not a spread: see summaryFields in client/jobs.ts
    return rows.map((r) =>
      Object.assign(toClaimed(r), { token: r.lease_token, payload: r.payload, leaseUntil: r.lease_until }),
    );
  }

  /**
   * Completes a leased job with its result (ACK). Throws LeaseLostError if the
   * lease is not held any more — it ran out and the job was leased again, or it was
   * already acked: a job is never completed twice.
   *
   * @example
   * const [job] = await tusk.fetch({ queue: 'emails' });
   * if (job) await tusk.ack(job, { sent: true });
   */
  async ack(lease: Lease, result?: unknown): Promise<void> {
    const { id, token } = parse(leaseSchema, lease, 'lease');
    const json = toJson(result, 'result', this.#maxPayloadBytes);
    if (!(await this.#write(undefined, (db) => ackJob(db, this.schema, { id, token, result: json })))) {
      throw await this.#leaseLost('ack', id, token);
    }
  }

  /**
   * Gives a leased job back after a failed attempt (NACK): retried after
   * `delayMs` (default at once), or `dead` if out of attempts. Returns its state.
   *
   * @example
   * await tusk.nack(job, { delayMs: 5_000, error: 'SMTP server busy' }); // 'failed' or 'dead'
   */
  async nack(lease: Lease, options: { delayMs?: number; error?: string } = {}): Promise<JobState> {
    const { id, token } = parse(leaseSchema, lease, 'lease');
    const o = parse(nackOptionsSchema, options, 'options');
    const outcome: NackOutcome = {
      id,
      token,
      delayMs: o.delayMs,
      error: o.error === undefined ? undefined : { message: o.error },
    };
    const state = await this.#write(undefined, (db) => nackJob(db, this.schema, outcome));
    if (!state) throw await this.#leaseLost('nack', id, token);
    return state as JobState;
  }

  /**
   * Keeps a leased job for `ms` more from now (WORKING). Returns the new end.
   *
   * @example
   * const until = await tusk.extendLease(job, 60_000);
   */
  async extendLease(lease: Lease, ms: number): Promise<Date> {
    return (await this.working(lease, ms)).leaseUntil;
  }

  /**
   * Keeps a leased job for `ms` more from now, as `extendLease` does, and says whether a
   * cancel of the job was asked for (`tusk.cancel`): a consumer of `fetch` has no signal,
   * so this is how it hears one — it should stop and `nack` (or `ack`) the job. One
   * statement; throws `LeaseLostError` when the lease is not held any more.
   *
   * @example
   * const { cancelRequested } = await tusk.working(job, 60_000);
   * if (cancelRequested) return tusk.nack(job, { error: 'cancelled' });
   */
  async working(lease: Lease, ms: number): Promise<{ leaseUntil: Date; cancelRequested: boolean }> {
    const { id, token } = parse(leaseSchema, lease, 'lease');
    const duration = parse(leaseMsSchema, ms, 'ms');
    const answer = await this.#write(undefined, (db) => working(db, this.schema, id, token, duration));
    if (!answer) throw await this.#leaseLost('extend the lease of', id, token);
    return answer;
  }

  async #leaseLost(what: string, id: string, token: string): Promise<LeaseLostError> {
    const now = await this.#write(undefined, (db) => leaseState(db, this.schema, id));
    const why = !now
      ? 'there is no such job'
      : now.state === 'running' && now.token !== null && BigInt(now.token) > BigInt(token)
        ? `its lease ran out and it was leased again (now attempt ${now.attempts}, running)`
        : now.state === 'running'
          ? `it is running under another lease (attempt ${now.attempts})`
          : `it is ${now.state} now`;
    return new LeaseLostError(`cannot ${what} job ${id} (lease ${token}): ${why}`);
  }

  /**
   * Runs a job again: a `dead`, `cancelled` or `expired` job, or a `failed` one waiting
   * for its retry, becomes available now with its attempts reset (its errors are kept).
   * Returns true if it was re-queued, false if it is in no state to be (waiting,
   * running, succeeded), null for an unknown id.
   *
   * @example
   * await tusk.retry(id); // true: queued again
   */
  async retry(id: string | number | bigint): Promise<boolean | null> {
    const key = jobId(id);
    if ((await this.#write(undefined, (db) => retryJobs(db, this.schema, [key]))).length > 0) return true;
    return (await this.getJob(key)) ? false : null;
  }

  /**
   * Runs again every job in `state` (default `dead`) matching the filter. Returns how many.
   *
   * @example
   * await tusk.retryAll({ task: 'send_email', tenant: 'acme', state: 'dead' });
   */
  async retryAll(
    filter: {
      state?: 'dead' | 'cancelled' | 'expired' | 'failed';
      task?: string;
      tenant?: string;
      queue?: string;
    } = {},
  ): Promise<number> {
    const f = parse(retryAllSchema, filter, 'filter');
    return this.#write(undefined, async (db) => {
      const ids = await selectRetryable(db, this.schema, {
        state: f.state ?? 'dead',
        task: f.task ?? null,
        tenant: f.tenant ?? null,
        queue: f.queue ?? null,
      });
      let n = 0;
      for (let i = 0; i < ids.length; i += 10_000)
        n += (await retryJobs(db, this.schema, ids.slice(i, i + 10_000))).length;
      return n;
    });
  }

  /**
   * The task definitions workers recorded when they started (the newest start's, a row a
   * task): what producers without the task list apply.
   *
   * @example
   * for (const d of await tusk.recordedTasks()) console.log(d.task, d.queue, d.maxAttempts, d.recordedBy);
   */
  async recordedTasks(): Promise<RecordedDefinition[]> {
    return recordedDefinitions(await this.pool(), this.schema);
  }

  /** The definition of a task: given in `tasks`, or a method of a registered class. */
  #definition(task: string): TaskDefinition | undefined {
    return this.#tasks.get(task) ?? this.#sources.definition(task);
  }

  /**
   * The definitions of the tasks about to be enqueued: this instance's own, else the ones
   * workers recorded in the database (read only when one of `tasks` has none here, or when
   * `tasks` is null: not known yet).
   */
  async #definitions(tasks: readonly unknown[] | null): Promise<(task: string) => TaskDefinition | undefined> {
    const own = (task: string) => this.#definition(task);
    if (tasks?.every((task) => typeof task !== 'string' || own(task))) return own;
    const recorded = await this.#recorded.definitions();
    return (task) => own(task) ?? recorded.get(task);
  }

  /**
   * This instance without its task types: `enqueue` and `enqueueMany` take any task name
   * and any payload (schemas still apply at run time). For tasks outside the typed list.
   *
   * @example
   * await tusk.untyped.enqueue('legacy_task', { anything: true });
   */
  get untyped(): Tusk {
    return this as unknown as Tusk;
  }

  /**
   * Registers a class whose methods can run as jobs (`obj.async.method()`):
   * `tusk.async(instance).method(...args)` enqueues the job `Type.method` with the
   * instance's id as its source, and a worker of this instance loads the instance with
   * `load` and calls the method (its return value is the job's result).
   *
   * @example
   * tusk.register(DataReport, { load: (id) => DataReport.find(id), id: (r) => r.id });
   */
  register<T>(cls: abstract new (...args: never[]) => T, options: SourceOptions<NoInfer<T>>): void {
    this.#sources.register(cls, options);
  }

  /**
   * Calls a method of an instance of a registered class as a job: each method takes its
   * own arguments (checked by TypeScript, sent as JSON) and resolves with the job's id.
   * `options` are enqueue's (tenant, queue, delayMs, dedupe, client, ...).
   *
   * @example
   * const { id } = await tusk.async(report, { tenant: 'acme', delayMs: 60_000 }).execute('pdf', 2);
   */
  async<T extends object>(instance: T, options: AsyncOptions = {}): AsyncCalls<T> {
    return asyncCalls(this.#sources, instance, options, (task, payload, opts) =>
      this.untyped.enqueue(task, payload, opts),
    );
  }

  /**
   * Enqueues a job at every tick of a cron expression (croner: 5 fields, or 6 with
   * seconds first), read in `tz` (default UTC). Running workers enqueue each tick exactly
   * once, a little ahead, so its job starts on time. Same as `tusk.schedules.set`.
   *
   * @example
   * await tusk.schedule('nightly-report', '0 3 * * *', { task: 'report', payload: { kind: 'daily' }, tenant: 'acme', tz: 'Europe/Paris' });
   */
  schedule(name: string, cron: string, options: ScheduleOptions = {}): Promise<ScheduleInfo> {
    return this.schedules.set(name, cron, options);
  }

  /**
   * Applies history retention now, to the end (workers also do it, a batch at a time):
   * drops the day partitions older than the longest retention in force, deletes older
   * rows of tenants kept shorter, `batch` rows per transaction (default 10 000), and
   * creates missing partitions. Waits for another process doing it. Returns the totals.
   *
   * @example
   * await tusk.tenants.setDefault({ retention: '30 days' });
   * const { dropped, deleted } = await tusk.prune({ onProgress: (b) => console.log(b) });
   */
  async prune(
    options: { batch?: number; onProgress?: (batch: PruneBatch) => void } = {},
  ): Promise<{ dropped: string[]; deleted: number }> {
    const o = parse(pruneOptionsSchema, options, 'options');
    const total = { dropped: [] as string[], deleted: 0 };
    for (;;) {
      const batch = await this.#write(undefined, (db) => maintainHistory(db, this.schema, o.batch ?? 10_000));
      if (!batch) {
        await new Promise((r) => setTimeout(r, 100)); // another process is at it
        continue;
      }
      total.dropped.push(...batch.dropped);
      total.deleted += batch.deleted;
      o.onProgress?.(batch);
      if (!batch.more) return total;
    }
  }

  /**
   * A tenant's finished jobs, newest first (default the last 100): for dashboards, indexed
   * whatever the history's size. For the next page, pass the last job of this one as
   * `before`: the page starts after it, jobs that finished in the same instant included
   * (those are ordered by id). If that job is gone by then (retried, deleted), the page
   * starts after its id among the jobs of its millisecond (see the reference for the one
   * case this is not exact). A date as `before`: the jobs finished strictly before it.
   *
   * @example
   * let page = await tusk.finishedJobs({ tenant: 'acme', limit: 50 });
   * while (page.length > 0) {
   *   show(page);
   *   page = await tusk.finishedJobs({ tenant: 'acme', limit: 50, before: page[page.length - 1] });
   * }
   */
  async finishedJobs(options: {
    tenant: string;
    limit?: number;
    before?: Date | { id: string; finishedAt: Date | null };
  }): Promise<Job[]> {
    const o = parse(finishedJobsSchema, options, 'options');
    const pool = await this.pool();
    const [before, beforeId] =
      o.before === undefined
        ? [null, null]
        : o.before instanceof Date
          ? [o.before, null]
          : [o.before.finishedAt, jobId(o.before.id)];
    const rows = await this.#write(pool, () =>
      selectFinishedJobs(pool, this.schema, o.tenant, o.limit ?? 100, before, beforeId),
    );
    return rows.map(toJob);
  }

  /**
   * A job by id, whatever its state; null if there is no such job. On a typed instance,
   * its payload and result have its task's types (check `job.task` to narrow them).
   *
   * @example
   * const job = await tusk.getJob(id);
   * console.log(job?.state, job?.attempts, job?.errors);
   */
  async getJob(id: string | number | bigint): Promise<TypedJob<L> | null> {
    const key = jobId(id);
    const pool = await this.pool();
    const row = await this.#write(pool, () => selectJob(pool, this.schema, key));
    return row ? (toJob(row) as TypedJob<L>) : null;
  }

  /**
   * Waits for a job to finish (`succeeded`, `dead`, `cancelled` or `expired`) and returns
   * it; after `timeoutMs` (default 30 s) returns it as it is — check `state`. Null for an
   * unknown id. No polling: one listening connection per Tusk instance serves every waiter,
   * woken when the job's end is committed.
   *
   * @example
   * const { id } = await tusk.enqueue('render', { doc: 7 });
   * const job = await tusk.waitFor(id, { timeoutMs: 60_000 });
   * if (job?.state === 'succeeded') send(job.result);
   */
  async waitFor(id: string | number | bigint, options: { timeoutMs?: number } = {}): Promise<TypedJob<L> | null> {
    const key = jobId(id);
    const o = parse(waitOptionsSchema, options, 'options');
    return (await this.#finishes().wait(key, o.timeoutMs ?? 30_000)) as TypedJob<L> | null;
  }

  /**
   * Calls `fn` with the ids of each batch of jobs that finishes (any state), on the same
   * listening connection as `waitFor`, until the returned function is called. The HTTP
   * server's event stream is made of it. The ids are as announced, by a notification any
   * role may send: read the jobs (`getJob`) for what became of them, as the stream does.
   *
   * @example
   * const stop = await tusk.onFinished((ids) => console.log('finished', ids));
   */
  async onFinished(fn: (ids: string[]) => void): Promise<() => void> {
    return this.#finishes().subscribe('finished', fn);
  }

  /**
   * Calls `fn` with the ids of each batch of running jobs whose progress a worker wrote
   * (`ctx.progress`, at most once a heartbeat a job), like `onFinished`.
   *
   * @example
   * const stop = await tusk.onProgress(async (ids) => console.log(ids));
   */
  async onProgress(fn: (ids: string[]) => void): Promise<() => void> {
    return this.#finishes().subscribe('progress', fn);
  }

  #finishes(): Waiters<Job> {
    if (this.#closed) throw new TuskError('this Tusk instance is closed');
    this.#waiters ??= new Waiters<Job>({
      schema: this.schema,
      log: this.#log,
      database: () => this.#database(),
      read: (job) => this.getJob(job) as Promise<Job | null>,
    });
    return this.#waiters;
  }

  /**
   * Cancels a job: a waiting job ends `cancelled` at once; a running one has its
   * `ctx.signal` aborted and ends `cancelled` if the handler then fails. Returns the
   * job's state after the call (`running` for a running job), null for an unknown id.
   *
   * @example
   * await tusk.cancel(id); // 'cancelled', or 'running' while its handler stops
   */
  async cancel(id: string | number | bigint): Promise<JobState | null> {
    const key = jobId(id);
    return (await this.#write(undefined, (db) => cancelJob(db, this.schema, key))) as JobState | null;
  }

  /**
   * Deletes a job that waits to run (available, scheduled, retrying) or has finished, with
   * its record: it is gone from `getJob`, lists and history. A running job is not deleted
   * (`'running'`: cancel it), nor one other jobs depend on (`'has_dependents'`: cancel it
   * and its flow settles them).
   *
   * @example
   * await tusk.deleteJob(id); // 'deleted' | 'running' | 'has_dependents' | 'not_found'
   */
  async deleteJob(id: string | number | bigint): Promise<DeleteOutcome> {
    const key = jobId(id);
    const [outcome] = await this.#write(undefined, (db) => deleteJobs(db, this.schema, [key]));
    return outcome ?? 'not_found';
  }

  /**
   * Counts by state in total, per tenant, per queue and per task, and the age of the
   * oldest waiting job.
   * Unfinished jobs are counted now, finished ones over the last `windowMs` (default an
   * hour). It scans the unfinished jobs: fine for dashboards, not for every request.
   *
   * @example
   * const { total, tenants } = await tusk.stats({ windowMs: 600_000 });
   */
  async stats(options: { windowMs?: number } = {}): Promise<Stats> {
    const windowMs = parse(statsOptionsSchema, options, 'options').windowMs ?? 3_600_000;
    return this.#write(undefined, (db) => collectStats(db, this.schema, windowMs));
  }

  /**
   * The queue's upkeep, for a process that runs no worker (workers run their own):
   * crash recovery of expired leases and dead workers, promotion of due jobs, expiry,
   * history partitions and retention, schedule ticks. Call `start()` (or `runOnce()`).
   * Any number of processes may run it; each part is done by one at a time.
   *
   * @example
   * const upkeep = tusk.upkeep();
   * upkeep.start(); // every 500 ms
   * // ...
   * await upkeep.stop();
   */
  upkeep(options: UpkeepOptions = {}): Upkeep {
    if (this.#closed) throw new TuskError('this Tusk instance is closed');
    const o = parse(upkeepOptionsSchema, options, 'upkeep options');
    const upkeep = new Upkeep(
      {
        schema: this.schema,
        log: this.#log,
        database: () => this.#database(),
        forget: (u) => this.#upkeeps.delete(u),
      },
      o,
    );
    this.#upkeeps.add(upkeep);
    return upkeep;
  }

  /**
   * A worker running the given task handlers. Call `start()` on it.
   *
   * @example
   * const worker = tusk.worker({ tasks: { send_email: async (p, ctx) => send(p) }, concurrency: 16 });
   * await worker.start();
   */
  worker(options: WorkerOptions): Worker {
    if (this.#closed) throw new TuskError('this Tusk instance is closed');
    const host: WorkerHost = {
      schema: this.schema,
      tasks: this.#tasks,
      sources: this.#sources,
      log: this.#log,
      maxPayloadBytes: this.#maxPayloadBytes,
      database: () => this.#database(),
      forget: (w) => this.#workers.delete(w),
    };
    const worker = new Worker(host, options);
    this.#workers.add(worker);
    return worker;
  }

  /**
   * Stops this instance's workers (gracefully), drainers and upkeeps, closes its waiters
   * (`waitFor`), then the pool it created (a pool passed in is left open).
   *
   * @example
   * process.once('SIGTERM', () => void tusk.close());
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    await Promise.all([...this.#workers, ...this.#drainers, ...this.#upkeeps].map((w) => w.stop()));
    await this.#waiters?.close();
    this.#closed = true;
    const db = await this.#db?.catch(() => null);
    this.#db = null;
    await db?.close();
  }

  /** Runs a statement on `client` if given, else on the pool; explains a missing schema. */
  async #write<T>(client: Queryable | undefined, run: (db: Queryable) => Promise<T>): Promise<T> {
    const db = client ?? (await this.pool());
    try {
      return await run(db);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (
        code === SQLSTATE.undefinedTable ||
        code === SQLSTATE.invalidSchemaName ||
        code === SQLSTATE.undefinedFunction
      ) {
        throw new TuskSchemaError(
          `Tusk schema "${this.schema}" is missing or out of date: run \`tusk migrate\` or \`await tusk.migrate()\` (${(error as Error).message})`,
          { cause: error },
        );
      }
      throw error;
    }
  }
}

/** An entry of a batch begun by COPY that the general path must write (see #copyMany). */
class NotPlain extends Error {}

/** Entries checked and sent at a time when a batch is written by COPY as it is checked. */
const COPY_SLICE = 1000;
