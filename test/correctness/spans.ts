import { type ChildProcess, spawn } from 'node:child_process';
import type { Handler } from '../../src/index.js';
import { CLI, cliEnv } from '../cli.js';
import type { TestDb } from '../helpers.js';

/** One run of a handler: from its start to when it finished or stopped on ctx.signal. */
export interface Span {
  job: string;
  attempt: number;
  tenant: string;
  /** Which worker ran it. */
  who: string;
  /** performance.timeOrigin + performance.now(), in ms. */
  started: number;
  /** Null while it runs. */
  ended: number | null;
  how: 'finished' | 'aborted' | null;
}

const now = () => performance.timeOrigin + performance.now();

/**
 * Pairs of spans with the same key (e.g. the job, or the tenant) that ran at the same
 * time. A span still running counts as running forever.
 */
export function overlaps(spans: readonly Span[], key: (s: Span) => string): Array<[Span, Span]> {
  const found: Array<[Span, Span]> = [];
  const sorted = [...spans].sort((a, b) => a.started - b.started);
  for (let i = 0; i < sorted.length; i++) {
    for (let j = i + 1; j < sorted.length; j++) {
      const a = sorted[i] as Span;
      const b = sorted[j] as Span;
      if (key(a) === key(b) && b.started < (a.ended ?? Number.POSITIVE_INFINITY)) found.push([a, b]);
    }
  }
  return found;
}

/** A readable line per span, for assertion messages. */
export const describeSpans = (spans: readonly Span[]) => {
  const t0 = Math.min(...spans.map((s) => s.started));
  return spans
    .map(
      (s) =>
        `job ${s.job} attempt ${s.attempt} on ${s.who}: ${Math.round(s.started - t0)}..${s.ended === null ? 'running' : Math.round(s.ended - t0)} ms${s.how ? ` ${s.how}` : ''}`,
    )
    .join('\n');
};

/**
 * Records the runs of handlers made by `handler()` in this process: each waits `ms` (its
 * payload's), or stops at once when ctx.signal aborts, as a handler should.
 */
export class Spans {
  readonly all: Span[] = [];

  handler(who: string): Handler {
    return async (payload, ctx) => {
      const span: Span = {
        job: ctx.job.id,
        attempt: ctx.job.attempt,
        tenant: ctx.job.tenant,
        who,
        started: now(),
        ended: null,
        how: null,
      };
      this.all.push(span);
      const aborted = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), (payload as { ms: number }).ms);
        const abort = () => {
          clearTimeout(timer);
          resolve(true);
        };
        if (ctx.signal.aborted) abort();
        else ctx.signal.addEventListener('abort', abort, { once: true });
      });
      span.ended = now();
      span.how = aborted ? 'aborted' : 'finished';
      if (aborted) throw ctx.signal.reason;
      return { attempt: ctx.job.attempt };
    };
  }
}

/** The test's own table where worker processes record their spans (test/correctness/fixtures/spans.mjs). */
export async function createSpansTable(db: TestDb): Promise<void> {
  await db.rows(
    `CREATE TABLE IF NOT EXISTS $schema.spans (n serial PRIMARY KEY, job_id bigint, attempt int, tenant text,
       who text, started float8, ended float8, how text)`,
  );
}

export async function recordedSpans(db: TestDb, jobs: string[]): Promise<Span[]> {
  const rows = await db.rows<Span & { job_id: string }>(
    'SELECT job_id::text, attempt, tenant, who, started, ended, how FROM $schema.spans WHERE job_id = ANY($1::bigint[]) ORDER BY n',
    [jobs],
  );
  return rows.map(({ job_id, ...s }) => ({ ...s, job: job_id }));
}

const SPANS = new URL('./fixtures/spans.mjs', import.meta.url).pathname;

/** `tusk worker` in a child process, running the `span` task of fixtures/spans.mjs. */
export function startSpanWorker(db: TestDb, ...args: string[]): ChildProcess {
  const child = spawn(process.execPath, [CLI, 'worker', '--require', SPANS, ...args], {
    env: cliEnv(db.url, db.schema),
    stdio: 'pipe',
  });
  child.stderr?.on('data', (d) => process.env.TUSK_TEST_VERBOSE && process.stderr.write(d));
  return child;
}
