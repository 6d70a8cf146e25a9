import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { JobRecord } from '../client/entries.js';
import { ident, literal } from '../db/schema.js';
import { compareIds } from './insertJobs.js';

/**
 * Inserts jobs with COPY: about twice the rows per second of INSERT ... SELECT, whose
 * per-row executor work dominates big batches (measured: 10 000 jobs in ~35 ms against
 * ~70 ms, plus ~30 ms of JSON parsing). Ids are drawn first, in one statement, so they
 * come back in input order; the insert trigger sends one NOTIFY for the COPY. For jobs
 * without a delay or dedup key (COPY cannot compute a server-side start time).
 */
export async function copyJobs(
  client: pg.PoolClient | pg.Client,
  schema: string,
  records: JobRecord[],
): Promise<string[]> {
  const s = ident(schema);
  // draw the ids while the rows are turned into COPY text
  const drawing = client.query<{ ids: string }>(
    `SELECT string_agg(nextval(${literal(`${s}.jobs_id_seq`)})::text, ',') AS ids FROM generate_series(1, $1)`,
    [records.length],
  );
  const lines = records.map(
    (r) =>
      `\t${copyText(r.tenant ?? 'default')}\t${copyText(r.queue ?? 'default')}\t${copyText(r.task)}\t` +
      `${copyText(r.payload)}\t${r.priority ?? 0}\t${r.maxAttempts ?? 5}\t${copyText(r.concurrencyKey ?? '')}\t` +
      `${r.expiresAt ? r.expiresAt.toISOString() : '\\N'}\t${copyNullable(r.retry)}\t` +
      `${copyNullable(r.sourceType)}\t${copyNullable(r.sourceId)}\t${copyNullable(r.sourceMethod)}\n`,
  );
  const { rows } = await drawing;
  const ids = (rows[0]?.ids ?? '').split(',').sort(compareIds);
  let text = '';
  for (const [i, line] of lines.entries()) text += ids[i] + line;
  const copy = client.query(
    copyFrom(
      `COPY ${s}.jobs (id, tenant, queue, task, payload, priority, max_attempts, concurrency_key, expires_at, retry,
                     source_type, source_id, source_method) FROM STDIN`,
    ),
  );
  await pipeline(Readable.from([text]), copy);
  return ids;
}

const SPECIAL = /[\\\t\n\r]/;

/** A value in COPY's text format, `\N` for undefined. */
const copyNullable = (value: string | undefined): string => (value === undefined ? '\\N' : copyText(value));

/** A value in COPY's text format: backslash, tab, newline and carriage return escaped. */
function copyText(value: string): string {
  if (!SPECIAL.test(value)) return value;
  return value.replace(/[\\\t\n\r]/g, (c) => (c === '\\' ? '\\\\' : c === '\t' ? '\\t' : c === '\n' ? '\\n' : '\\r'));
}
