import { readFileSync } from 'node:fs';

/** This process's peak resident set size in MB: VmHWM on Linux, else getrusage's maxRSS. */
export function peakRssMb(): number {
  try {
    const match = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (match?.[1]) return Number(match[1]) / 1024;
  } catch {
    // not Linux
  }
  return process.resourceUsage().maxRSS / 1024;
}
