// Task handlers of the chaos run's worker processes (`tusk worker --require chaos/tasks.mjs`).
// Each execution is recorded, and committed, before the job completes: the run then knows
// every time a job's handler ran, whatever happened to the process afterwards.
import pg from 'pg';

const pool = new pg.Pool({
  connectionString: process.env.CHAOS_RECORD_URL ?? process.env.DATABASE_URL,
  max: 4,
  application_name: 'chaos-handler',
});
// a connection dropped under us (server restart) must not crash the process
pool.on('error', () => {});
const schema = `"${process.env.TUSK_SCHEMA}"`;

export const tasks = {
  async work(payload, ctx) {
    // dated from the handler's start, not the insert's: the insert can wait for one of the
    // pool's 4 connections, and a process frozen meanwhile (SIGSTOP) wrote it 6 s later,
    // after the job's next attempt. With the claim's time of this attempt: the restart
    // check times the first claims after it.
    const at = Date.now();
    await pool.query(
      `INSERT INTO ${schema}.chaos_executions (job_id, attempt, pid, at, claimed_at)
       SELECT $1, $2, $3, to_timestamp($4::float8 / 1000), (SELECT started_at FROM ${schema}.jobs WHERE id = $1)`,
      [ctx.job.id, ctx.job.attempt, process.pid, at],
    );
    await new Promise((resolve) => setTimeout(resolve, payload.ms));
    return { pid: process.pid };
  },
};

export const shutdown = () => pool.end();
