/**
 * Base class of the errors Tusk throws on purpose. Catch it with `instanceof TuskError`.
 */
export class TuskError extends Error {
  override name = 'TuskError';
}

/** One bad field: its path (`payload.items[2].qty`) and what is wrong with it. */
export interface ValidationIssue {
  path: string;
  message: string;
}

/**
 * A bad argument: wrong type, out of range, unknown option, a payload its task's schema
 * refuses. Nothing was written. `field` names the offending argument, e.g.
 * `options.delayMs` or `jobs[3].task`; `issues` lists every bad field under it (one, but
 * for schema validation).
 */
export class TuskValidationError extends TuskError {
  override name = 'TuskValidationError';
  readonly issues: ValidationIssue[];
  constructor(
    readonly field: string,
    message: string,
    issues?: ValidationIssue[],
  ) {
    super(`${field}: ${message}`);
    this.issues = issues ?? [{ path: field, message }];
  }
}

/** The database schema is missing, was migrated by a newer Tusk, or predates the baseline. */
export class TuskSchemaError extends TuskError {
  override name = 'TuskSchemaError';
}

/** A lease was lost: the job was re-claimed by someone else, or already finished. */
export class LeaseLostError extends TuskError {
  override name = 'LeaseLostError';
}

/** PostgreSQL error codes Tusk reacts to. */
export const SQLSTATE = {
  undefinedTable: '42P01',
  insufficientPrivilege: '42501',
  undefinedFunction: '42883',
  invalidSchemaName: '3F000',
  uniqueViolation: '23505',
  checkViolation: '23514',
  lockNotAvailable: '55P03',
  queryCanceled: '57014',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
} as const;

/** The job's handler ran past its `timeoutMs`. */
export class JobTimeoutError extends TuskError {
  override name = 'JobTimeoutError';
  constructor(readonly timeoutMs: number) {
    super(`the job ran past its timeout of ${timeoutMs} ms`);
  }
}

/** The job was cancelled while it ran (`tusk.cancel(id)`). */
export class JobCancelledError extends TuskError {
  override name = 'JobCancelledError';
  constructor() {
    super('the job was cancelled');
  }
}

/** The worker is stopping and its grace period is over. */
export class WorkerStoppingError extends TuskError {
  override name = 'WorkerStoppingError';
  constructor() {
    super('the worker stopped before the job finished');
  }
}

/**
 * An isolated handler's thread died before returning: it ran out of its memory
 * (`isolate.memoryMb`), crashed (an exception nothing caught), or exited.
 */
export class HandlerCrashedError extends TuskError {
  override name = 'HandlerCrashedError';
}

/** No handler for the job's task in this worker. */
export class UnknownTaskError extends TuskError {
  override name = 'UnknownTaskError';
}

/**
 * What a job is about is gone: the `load` of a registered class found no record for the
 * job's source. (Lookups of unknown ids and names return null instead.)
 */
export class TuskNotFoundError extends TuskError {
  override name = 'TuskNotFoundError';
}

const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'EPIPE',
  SQLSTATE.adminShutdown,
  SQLSTATE.crashShutdown,
  SQLSTATE.cannotConnectNow,
]);

/**
 * True for errors that mean the server is unreachable or restarting (worth retrying),
 * as opposed to a refusal (bad password, missing schema) that retrying will not mend.
 */
export function isConnectionError(error: unknown): boolean {
  const e = error as { code?: string; message?: string } | null;
  if (!e) return false;
  if (e.code && UNREACHABLE.has(e.code)) return true;
  if (e.code?.startsWith('08')) return true; // connection exception class
  return /Connection terminated|connection timeout/i.test(e.message ?? '');
}
