import { JobCancelledError, WorkerStoppingError } from '../errors.js';
import { decideRetry, type RetryPolicy } from '../policies/backoff.js';
import type { JsonText, OutcomeEntry } from '../queries/outcomes.js';
import type { TaskDefinition } from '../tasks/definition.js';
import { toJson } from '../validation/json.js';
import type { ActiveJob } from './activeJob.js';
import type { WorkerCounters } from './counters.js';
import { errorRecord } from './errorRecord.js';
import type { OutcomeWriter } from './outcomeWriter.js';
import type { Outcome } from './runAttempt.js';

/** Where ended attempts go: counted, their outcomes written. */
export interface Settling {
  counters: WorkerCounters;
  outcomes: Pick<OutcomeWriter, 'finish' | 'requeue'>;
  /** Largest `ctx.stats()` as JSON: larger fails the attempt. */
  maxPayloadBytes: number;
}

/** The outcome of `job` that says nothing but whose it is: the job and its attempt's lease token. */
export function leaseEntry(job: ActiveJob): OutcomeEntry {
  return { id: job.row.id, token: job.row.lease_token };
}

/**
 * Counts an ended attempt and hands its outcome to be written: succeeded; failed and
 * retried (requeued after its backoff), dead, or cancelled; given back when the worker
 * stopped it. The outcome of an attempt whose lease was lost is dropped: the job is
 * another attempt's now. `runMs`: how long its attempt ran (its payload's validation and its handler).
 */
export function settleAttempt(
  job: ActiveJob,
  task: TaskDefinition | undefined,
  outcome: Outcome,
  runMs: number,
  to: Settling,
): void {
  const { row } = job;
  const { counters, outcomes } = to;
  let stats: JsonText | undefined;
  if (job.stats) {
    try {
      stats = toJson(job.stats, 'stats', to.maxPayloadBytes);
    } catch (error) {
      if (outcome.ok) outcome = { ok: false, error };
    }
  }
  if (job.lost) {
    counters.lost++;
    return;
  }
  const entry = leaseEntry(job);
  entry.runMs = Math.round(runMs);
  entry.queuedMs = Math.round((job.startedAt || job.claimedAt) - job.claimedAt);
  if (stats !== undefined) entry.stats = stats;
  if (job.progress !== null) entry.progress = job.progress;
  if (outcome.ok) {
    counters.succeeded++;
    entry.result = outcome.result;
    outcomes.finish('succeeded', entry);
    return;
  }
  entry.error = errorRecord(outcome.error, row.attempts);
  const reason = job.reason;
  if (reason instanceof WorkerStoppingError) {
    if (row.attempts < row.max_attempts) {
      outcomes.requeue(entry);
    } else {
      // no attempt left: it ends as a lost lease or a nack would (retrying it broke maxAttempts)
      counters.dead++;
      outcomes.finish('dead', entry);
    }
  } else if (reason instanceof JobCancelledError) {
    counters.cancelled++;
    outcomes.finish('cancelled', entry);
  } else {
    // the job's own retry settings (from its enqueue) over its task's
    const policy = row.retry ? { ...task?.retry, ...(row.retry as RetryPolicy) } : task?.retry;
    const decision = outcome.final
      ? ({ retry: false } as const)
      : decideRetry(policy, outcome.error, row.attempts, row.max_attempts);
    if (decision.retry) {
      counters.retried++;
      entry.delayMs = decision.delayMs;
      if (decision.queue) entry.queue = decision.queue;
      outcomes.requeue(entry);
    } else {
      counters.dead++;
      outcomes.finish('dead', entry);
    }
  }
}
