// Flows when workers die: children's workers are killed with SIGKILL mid-flow, again and
// again; the parent still runs once, after the last child, with every child's result.
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../src/index.js';
import { cliEnv, exited, startWorker } from './cli.js';
import { eventually, sleep, useTestDb } from './helpers.js';

const db = useTestDb(import.meta.url);
const ROUNDS = 3;
const CHILDREN = 100;
const MAX_KILLS = 10;

beforeAll(async () => {
  await db.tusk.migrate();
  await db.pool.query(
    `CREATE TABLE "${db.schema}".executions (job_id bigint, attempt int, pid int, at timestamptz DEFAULT clock_timestamp())`,
  );
});
afterAll(() => db.pool.query(`DROP TABLE IF EXISTS "${db.schema}".executions`));

describe('a flow whose workers are killed', () => {
  it(`1 parent and ${CHILDREN} children, ${ROUNDS} rounds: the parent runs once, after the last child, with all their results`, async () => {
    const env = cliEnv(db.url, db.schema);
    const spawn = () => startWorker(env, '--concurrency', '3', '-q', 'crash-children');
    const parentRuns: string[] = [];
    // the parents' worker lives in this process and is never killed: a second run of the
    // parent could only come from a second release
    const parents = db.worker({
      queues: ['crash-parents'],
      tasks: {
        parent: async (_p: unknown, ctx) => {
          parentRuns.push(ctx.job.id);
          return (await ctx.dependencies()).map((d) => [d.state, (d.result as { n: number } | null)?.n]);
        },
      },
    });
    await parents.start();
    let live: ChildProcess[] = [];
    try {
      for (let round = 1; round <= ROUNDS; round++) {
        const { id, children } = await db.tusk.flow({
          task: 'parent',
          queue: 'crash-parents',
          children: Array.from({ length: CHILDREN }, (_, n) => ({
            task: 'flow_child',
            queue: 'crash-children',
            payload: { n, ms: 60 + (n % 5) * 20 },
            // more attempts than kills: a child held (running or buffered) by a killed
            // worker loses an attempt each time, and must not run out of them
            maxAttempts: 100,
          })),
        });
        const childIds = children.map((c) => c.id);
        live = [spawn(), spawn()];
        let kills = 0;
        const left = async () =>
          (
            await db.rows<{ n: number }>('SELECT count(*)::int AS n FROM $schema.jobs WHERE id = ANY($1::bigint[])', [
              childIds,
            ])
          )[0]?.n ?? 0;
        // kill a worker (after it has started children) and start another, until no child
        // is left or MAX_KILLS were killed (a loaded machine makes progress slower, not the kills)
        for (let i = 0; (await left()) > 0 && kills < MAX_KILLS && i < 200; i++) {
          // a random moment to kill at, the interleaving under test (a slow machine: fewer children between kills)
          await sleep(300 + Math.floor(Math.random() * 500));
          const busy = await db.rows<{ pid: number }>(
            'SELECT DISTINCT pid FROM $schema.executions WHERE job_id = ANY($1::bigint[])',
            [childIds],
          );
          const victim = live.find((w) => busy.some((b) => b.pid === w.pid));
          if (!victim || (await left()) === 0) continue;
          victim.kill('SIGKILL');
          await exited(victim);
          kills++;
          live = [...live.filter((w) => w !== victim), spawn()];
        }
        const parent = (await eventually(async () => {
          const job = await db.tusk.getJob(id);
          return job?.finishedAt ? job : null;
        }, 120_000)) as Job;
        for (const w of live) w.kill('SIGTERM');
        await Promise.all(live.map(exited));
        live = [];

        const runs = await db.rows<{ n: number; jobs: number }>(
          'SELECT count(*)::int AS n, count(DISTINCT job_id)::int AS jobs FROM $schema.executions WHERE job_id = ANY($1::bigint[])',
          [childIds],
        );
        const history = await db.rows<{
          state: string;
          attempts: number;
          finished_at: Date;
          started_at: Date;
          id: string;
        }>(
          'SELECT id::text, state::text, attempts, started_at, finished_at FROM $schema.job_history WHERE id = ANY($1::bigint[])',
          [[id, ...childIds]],
        );
        const kids = history.filter((h) => h.id !== id);
        console.log(
          `flow under SIGKILL, round ${round}: ${kills} workers killed, ${runs[0]?.n} child runs for ${CHILDREN} children, ` +
            `at most ${Math.max(...kids.map((h) => h.attempts))} attempts of a child`,
        );
        expect(kills).toBeGreaterThan(0);
        // every child ended, succeeded (first: a child out of attempts would explain a cancelled parent)
        expect(history).toHaveLength(CHILDREN + 1);
        expect(kids.filter((h) => h.state !== 'succeeded')).toEqual([]);
        expect(parent.state).toBe('succeeded');
        expect(parent.attempts).toBe(1);
        expect(parentRuns.filter((p) => p === id)).toHaveLength(1);
        expect(parent.result).toEqual(Array.from({ length: CHILDREN }, (_, n) => ['succeeded', n]));
        const lastChild = Math.max(...kids.map((h) => h.finished_at.getTime()));
        expect(history.find((h) => h.id === id)?.started_at.getTime()).toBeGreaterThan(lastChild);
        expect(await db.rows('SELECT * FROM $schema.job_deps')).toEqual([]);
      }
    } finally {
      for (const w of live) w.kill('SIGKILL');
      await parents.stop();
    }
  }, 600_000);
});
