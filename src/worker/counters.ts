/** Counts since the worker started. */
export interface WorkerCounters {
  claimed: number;
  succeeded: number;
  retried: number;
  dead: number;
  cancelled: number;
  /** Attempts whose outcome was dropped because the lease was lost. */
  lost: number;
}
