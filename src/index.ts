// The package's entry: every public part, and the HTTP server made on demand. It re-exports
// the surfaces too, so it is in their layer (docs/ARCHITECTURE.md).
import type { ServerOptions, TuskServer } from './http/server.js';
import type { Tusk } from './tusk.js';

export type { JobPage, WorkerInfo } from './client/inspect.js';
export type { ScheduleInfo, Schedules } from './client/schedules.js';
export type { GroupStats, StateCounts, Stats } from './client/stats.js';
export type { TenantDefaults, TenantInfo, Tenants, WaitReason } from './client/tenants.js';
export type {
  DrizzleLike,
  KyselyLike,
  QueryFunctionLike,
  TransactionLike,
} from './db/adapters.js';
export type { EmbeddedOptions } from './db/embedded.js';
export type { Queryable } from './db/queryable.js';
export {
  type BullMQJob,
  type BullMQSinkOptions,
  bullmqSink,
  bullmqSinkReady,
  type RedisClientLike,
} from './drain/bullmq.js';
export { type DrainedBatch, Drainer, type DrainerOptions } from './drain/drainer.js';
export { type Sink, type SinkContext, StagedJob, type StagedOptions } from './drain/sink.js';
export { tuskSink } from './drain/tuskSink.js';
export {
  HandlerCrashedError,
  JobCancelledError,
  JobTimeoutError,
  LeaseLostError,
  TuskError,
  TuskNotFoundError,
  TuskSchemaError,
  TuskValidationError,
  UnknownTaskError,
  type ValidationIssue,
  WorkerStoppingError,
} from './errors.js';
export type { Listening, ServerOptions, TuskServer } from './http/server.js';
export { ApiTokens, type Principal, type TokenInfo } from './http/tokens.js';
export type { Logger } from './log.js';
export type { MetricsOptions } from './metrics/metrics.js';
export type { MigrateResult } from './migrate/migrate.js';
export type { Backoff, RetryPolicy } from './policies/backoff.js';
export type { DeleteOutcome } from './queries/deleteJobs.js';
export type { PruneBatch } from './queries/history.js';
export type { RecordedDefinition } from './queries/taskDefinitions.js';
export type { TenantSettings } from './queries/tenants.js';
export { type CrontabEntry, parseCrontab } from './schedules/crontab.js';
export type { ScheduleOptions } from './schedules/options.js';
export type { Json, JsonArgs } from './tasks/args.js';
export type { AsyncCalls, AsyncOptions } from './tasks/async.js';
export {
  type DefinedTask,
  defineTask,
  type EnqueueArgs,
  type TaskList,
  type TaskName,
  type TaskPayload,
  type TaskResult,
  type TypedFlowSpec,
  type TypedJob,
  type TypedJobSpec,
} from './tasks/define.js';
export type { IsolateOptions } from './tasks/isolate.js';
export type { SourceOptions } from './tasks/sources.js';
export { Tusk, type TuskOptions } from './tusk.js';
export type {
  Enqueued,
  EnqueueOptions,
  FlowIds,
  FlowSpec,
  Job,
  JobError,
  JobSource,
  JobSpec,
  JobState,
  JobSummary,
  Lease,
  LeasedJob,
  StageOptions,
  StageSpec,
} from './types.js';
export { Upkeep, type UpkeepOptions, type UpkeepReport } from './upkeep/upkeep.js';
export type {
  Handler,
  JobContext,
  TaskDefinition,
  Tasks,
  WorkerOptions,
} from './worker/options.js';
export { Worker, type WorkerCounters } from './worker/worker.js';

/**
 * Tusk's HTTP server for `tusk`: the REST API, the dashboard and Prometheus metrics. Its
 * code (Hono and the rest) is loaded on the first call, so that a program that never
 * serves HTTP does not load it.
 *
 * @example
 * import { createServer, Tusk } from 'tusk-queue';
 * const tusk = new Tusk();
 * const server = await createServer(tusk, { adminToken: process.env.TUSK_ADMIN_TOKEN });
 * const { url, close } = await server.listen({ port: 8080 }); // or mount server.app in your Hono app
 */
export async function createServer(tusk: Tusk, options: ServerOptions = {}): Promise<TuskServer> {
  const http = await import('./http/server.js');
  return http.createServer(tusk, options);
}
