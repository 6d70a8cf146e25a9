// CPU time of processes on this machine, for the profile's per-job figures.
import { readFileSync } from 'node:fs';

const TICKS_PER_S = 100; // USER_HZ of /proc/<pid>/stat

/** User + system CPU seconds of a process, or null when it is not on this machine. */
export function cpuSeconds(pid: number): number | null {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_S;
  } catch {
    return null;
  }
}

/** CPU seconds the given processes spent between `start()` and `stop()`; null if one is not readable. */
export function cpuOf(pids: number[]): { stop(): number | null } {
  const first = pids.map(cpuSeconds);
  return {
    stop() {
      let sum = 0;
      for (const [i, pid] of pids.entries()) {
        const a = first[i];
        const b = cpuSeconds(pid);
        if (a == null || b == null) return null;
        sum += b - a;
      }
      return sum;
    },
  };
}

/** Seconds of a `process.cpuUsage()` difference, user and system together. */
export const cpuTotal = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1e6;
