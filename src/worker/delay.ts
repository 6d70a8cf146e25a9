/**
 * Waits `ms`, or less: the wait is in `waiters` until it ends, and calling it there ends
 * it early (what wakes a sleeping claim loop, or a write waiting to retry).
 */
export function wakeableDelay(ms: number, waiters: Set<() => void>): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      waiters.delete(done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    waiters.add(done);
  });
}
