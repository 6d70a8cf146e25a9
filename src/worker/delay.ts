/**
 * Waits `ms`, or less: the wait is in each set of `waiters` until it ends, and calling it
 * from one ends it early (what wakes a sleeping claim loop, or a write waiting to retry).
 */
export function wakeableDelay(ms: number, ...waiters: Set<() => void>[]): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const set of waiters) set.delete(done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    for (const set of waiters) set.add(done);
  });
}
