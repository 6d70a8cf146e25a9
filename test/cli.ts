import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';

const run = promisify(execFile);
export const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;
export const FIXTURE = new URL('./fixtures/tasks.mjs', import.meta.url).pathname;

export function cliEnv(url: string, schema: string): NodeJS.ProcessEnv {
  return { ...process.env, DATABASE_URL: url, TUSK_SCHEMA: schema, TUSK_LOG_LEVEL: 'warn' };
}

/** Runs `tusk ...args`; resolves with its output and exit code. */
export async function tusk(env: NodeJS.ProcessEnv, ...args: string[]) {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLI, ...args], { env, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** Starts `tusk worker --require fixtures/tasks.mjs ...args` in the background. */
export function startWorker(env: NodeJS.ProcessEnv, ...args: string[]): ChildProcess {
  const child = spawn(process.execPath, [CLI, 'worker', '--require', FIXTURE, ...args], { env, stdio: 'pipe' });
  child.stderr?.on('data', (d) => process.env.TUSK_TEST_VERBOSE && process.stderr.write(d));
  return child;
}

export const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });

/**
 * The table the fixture worker's `record` task writes each execution to (job, attempt,
 * worker pid, when), in the test file's schema, for the file's tests.
 */
export function useExecutionsTable(db: { pool: { query(sql: string): Promise<unknown> }; schema: string }): void {
  beforeAll(() =>
    db.pool.query(
      `CREATE TABLE "${db.schema}".executions (job_id bigint, attempt int, pid int, at timestamptz DEFAULT clock_timestamp())`,
    ),
  );
  afterAll(() => db.pool.query(`DROP TABLE IF EXISTS "${db.schema}".executions`));
}
