import { mkdir, writeFile } from 'node:fs/promises';
import pg from 'pg';
import { startEmbedded } from '../../src/db/embedded.js';

/** The database the benchmarks run on: DATABASE_URL, else an embedded PostgreSQL. */
export async function benchDatabase(): Promise<{ url: string; close(): Promise<void> }> {
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, close: async () => {} };
  const server = await startEmbedded({ dir: '.tusk/bench-pg' });
  console.log(`(no DATABASE_URL: embedded PostgreSQL on port ${server.port})`);
  return { url: server.connectionString, close: () => server.stop() };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Percentile (nearest rank) of numbers; null for none. */
export function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? null;
}

export const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);

/**
 * Keeps the printed report of a full run as the suite's one summary, docs/benchmarks/<suite>.md
 * (dated, with its command): the runs' raw JSON stays out of the repository.
 */
export async function writeSummary(suite: string, command: string, report: string): Promise<string> {
  const dir = new URL('../../docs/benchmarks/', import.meta.url);
  await mkdir(dir, { recursive: true });
  // the run's JSON stays on the machine that ran it: a path to it means nothing in the repository
  const kept = report
    .split('\n')
    .filter((line) => !line.startsWith('results: bench/results/'))
    .join('\n');
  const text =
    `# Benchmark: ${suite}\n\nLast full run ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, ` +
    `\`${command}\` on a 2-core machine; ratios within one run are what compare.\n\n` +
    `\`\`\`text\n${kept.trim()}\n\`\`\`\n`;
  await writeFile(new URL(`${suite}.md`, dir), text);
  return `docs/benchmarks/${suite}.md`;
}

/** Writes a run's results to bench/results/<suite>-<time>.json (not kept in git); returns the path. */
export async function saveResults(suite: string, data: unknown): Promise<string> {
  const dir = new URL('../results/', import.meta.url);
  await mkdir(dir, { recursive: true });
  const name = `${suite}-${new Date().toISOString().replaceAll(':', '-').replace(/\..*/, '')}.json`;
  await writeFile(new URL(name, dir), `${JSON.stringify(data, null, 2)}\n`);
  return `bench/results/${name}`;
}

/** The server's version and settings that matter for comparing runs. */
export async function serverInfo(url: string): Promise<Record<string, string>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string; setting: string }>(
      `SELECT name, setting FROM pg_settings
       WHERE name IN ('server_version', 'synchronous_commit', 'shared_buffers', 'max_connections', 'fsync')`,
    );
    return Object.fromEntries(rows.map((r) => [r.name, r.setting]));
  } finally {
    await client.end();
  }
}

/** A progress line for long phases (rewritten in place on a terminal). */
export function status(line: string): void {
  if (process.stderr.isTTY) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
}
export function statusDone(): void {
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[2K');
}
