import type { JobError } from '../types.js';

/**
 * JSON text its producer has already checked (size, what jsonb can store): spliced into
 * the statement's JSON as is, so a big result is not stringified twice.
 */
export type JsonText = string;

/**
 * How one attempt ended, as finish_jobs and requeue_jobs read it: an element of their
 * `p_jobs` array (the recordsets of move_to_history and requeue_jobs). An outcome is
 * fenced by its lease token: one sent for a lease lost meanwhile changes nothing. A
 * requeue whose job had a cancel asked for is finished as cancelled with the same entry,
 * so every field may reach either function.
 */
export interface OutcomeEntry {
  /** The job, as decimal text. */
  id: string;
  /** The attempt's lease token, as decimal text. */
  token: string;
  /** What the handler returned (finish_jobs 'succeeded'). */
  result?: JsonText;
  /** The failure, appended to the job's errors (at most 50 kept). */
  error?: JobError;
  /** `ctx.stats()`, merged over the job's stats. */
  stats?: JsonText;
  /** The last `ctx.progress()`, over the one a heartbeat wrote. */
  progress?: JsonText;
  /** How long the handler ran; without it, from the claim to now. */
  runMs?: number;
  /** How long the job waited in the worker between its claim and its handler's start. */
  queuedMs?: number;
  /** requeue_jobs: run again after this long (failed until then), else available now. */
  delayMs?: number;
  /** requeue_jobs: the queue to run again in (a retry policy's `queue`). */
  queue?: string;
  /** requeue_jobs: the attempt does not count (claimed ahead, never started). */
  refund?: true;
}

/** The JSON array of outcomes a finish_jobs or requeue_jobs call takes. */
export function outcomesJson(entries: readonly OutcomeEntry[]): string {
  return `[${entries.map(entryJson).join(',')}]`;
}

/** One entry by hand rather than by JSON.stringify: the JSON text fields go in as they are. */
function entryJson(e: OutcomeEntry): string {
  let json = `{"id":"${e.id}","token":"${e.token}"`;
  if (e.runMs !== undefined) json += `,"run_ms":${e.runMs}`;
  if (e.queuedMs !== undefined) json += `,"queued_ms":${e.queuedMs}`;
  if (e.stats !== undefined) json += `,"stats":${e.stats}`;
  if (e.progress !== undefined) json += `,"progress":${e.progress}`;
  if (e.result !== undefined) json += `,"result":${e.result}`;
  if (e.error !== undefined) json += `,"error":${errorJson(e.error)}`;
  if (e.delayMs !== undefined) json += `,"delay_ms":${e.delayMs}`;
  if (e.queue !== undefined) json += `,"queue":${JSON.stringify(e.queue)}`;
  if (e.refund) json += ',"refund":true';
  return `${json}}`;
}

/** A failure's record as JSON (also the fields a consumer's nack sets over nack_job's own). */
export function errorJson(error: Partial<JobError>): string {
  return JSON.stringify(error);
}
