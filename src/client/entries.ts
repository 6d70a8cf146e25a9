import type { TaskDefinition } from '../tasks/definition.js';
import type { JobSpec } from '../types.js';
import { toJson } from '../validation/json.js';
import { derivedDedupKey } from './dedup.js';

/** Per-job options (see EnqueueOptions). */
type Options = Omit<JobSpec, 'task' | 'payload'>;

/**
 * A job ready to be written: validated, its payload as JSON text, its task definition's
 * defaults (tenant, queue, attempts) applied under the options given. Fields left undefined take
 * the table's defaults.
 */
export interface JobRecord {
  task: string;
  payload: string;
  tenant: string | undefined;
  queue: string | undefined;
  priority: number | undefined;
  runAt: Date | undefined;
  delayMs: number | undefined;
  maxAttempts: number | undefined;
  concurrencyKey: string | undefined;
  expiresAt: Date | undefined;
  retry: string | undefined;
  dedupKey: string | undefined;
  dedupWindowMs: number | undefined;
  debounceKey: string | undefined;
  debounceMaxWaitMs: number | undefined;
  sourceType: string | undefined;
  sourceId: string | undefined;
  sourceMethod: string | undefined;
  /** Ids of existing jobs it depends on, as decimal text. */
  dependsOn: string[] | undefined;
  /** Indexes of earlier records of the same write it depends on (a flow's children). */
  after: number[] | undefined;
  onDependencyFailure: 'cancel' | 'continue' | undefined;
  /** The field that named `dependsOn`, for the database's errors (`options.dependsOn`). */
  dependsOnField: string | undefined;
}

export function jobRecord(
  task: string,
  payload: unknown,
  options: Options,
  payloadField: string,
  maxPayloadBytes: number,
  definition?: TaskDefinition,
  dependsOnField?: string,
): JobRecord {
  const { retry, source, dependsOn } = options;
  const sourceId = source === undefined ? undefined : String(source.id);
  return {
    task,
    payload: toJson(payload, payloadField, maxPayloadBytes),
    tenant: options.tenant ?? definition?.tenant,
    queue: options.queue ?? definition?.queue,
    priority: options.priority,
    runAt: options.runAt,
    delayMs: options.delayMs ?? options.debounce?.delayMs,
    maxAttempts: options.maxAttempts ?? retry?.maxAttempts ?? definition?.retry?.maxAttempts,
    concurrencyKey: options.concurrencyKey,
    expiresAt: options.expiresAt,
    retry:
      retry && (retry.backoff !== undefined || retry.queue !== undefined)
        ? JSON.stringify({ backoff: retry.backoff, queue: retry.queue })
        : undefined,
    dedupKey:
      options.dedupKey ??
      (options.dedupe ? derivedDedupKey(task, payload, source && [source.type, sourceId as string]) : undefined),
    dedupWindowMs: options.dedupWindowMs,
    debounceKey: options.debounce?.key,
    debounceMaxWaitMs: options.debounce?.maxWaitMs,
    sourceType: source?.type,
    sourceId,
    sourceMethod: source?.method,
    dependsOn: dependsOn && dependsOn.length > 0 ? dependsOn.map(String) : undefined,
    after: undefined,
    onDependencyFailure: options.onDependencyFailure,
    dependsOnField,
  };
}

/**
 * A record as an element of the insert statement's JSON array. The payload JSON (already
 * checked) is spliced in as text, so big payloads are not stringified twice.
 */
export function jsonEntry(r: JobRecord): string {
  const rest = JSON.stringify({
    task: r.task,
    tenant: r.tenant,
    queue: r.queue,
    priority: r.priority,
    run_at: r.runAt,
    delay_ms: r.delayMs,
    max_attempts: r.maxAttempts,
    concurrency_key: r.concurrencyKey,
    expires_at: r.expiresAt,
    dedup_key: r.dedupKey,
    dedup_window_ms: r.dedupWindowMs,
    debounce_key: r.debounceKey,
    debounce_max_wait_ms: r.debounceMaxWaitMs,
    source_type: r.sourceType,
    source_id: r.sourceId,
    source_method: r.sourceMethod,
    depends_on: r.dependsOn,
    after: r.after,
    on_dependency_failure: r.onDependencyFailure,
    deps_at: r.dependsOnField,
  });
  const retry = r.retry === undefined ? '' : `,"retry":${r.retry}`;
  return `{"payload":${r.payload}${retry},${rest.slice(1)}`;
}

/** True when a job asks for deduplication or debouncing (it then goes through enqueue_dedup). */
export const hasDedup = (r: JobRecord): boolean => r.dedupKey !== undefined || r.debounceKey !== undefined;

/** True when a job waits for others (it then goes through enqueue_flow). */
export const hasDependencies = (r: JobRecord): boolean => r.dependsOn !== undefined || r.after !== undefined;

/** True when a job's start time is relative to the server's clock (COPY cannot say so). */
export const isDelayed = (r: JobRecord): boolean => r.delayMs !== undefined || r.runAt !== undefined;
