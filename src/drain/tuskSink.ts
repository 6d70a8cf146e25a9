import type { JobRecord } from '../client/entries.js';
import { writeRecords } from '../client/write.js';
import type { Sink, StagedJob } from './sink.js';

/**
 * Moves staged jobs into Tusk's own queue, in the drainer's transaction: a staged row
 * becomes exactly one job. Useful to absorb bursts: staging is one cheap insert into a
 * table no worker reads, and the drainer moves the rows in big batches (COPY).
 */
export const tuskSink: Sink = {
  name: 'tusk',
  transactional: true,
  async send(jobs, { client, schema }) {
    await writeRecords(client, schema, jobs.map(toRecord));
  },
};

function toRecord(job: StagedJob): JobRecord {
  const o = job.options;
  return {
    task: job.task,
    payload: job.payloadJson,
    tenant: o.tenant,
    queue: o.queue,
    priority: o.priority,
    runAt: o.runAt,
    delayMs: undefined,
    maxAttempts: o.maxAttempts,
    concurrencyKey: o.concurrencyKey,
    expiresAt: o.expiresAt,
    retry: o.retry === undefined ? undefined : JSON.stringify(o.retry),
    dedupKey: o.dedupKey,
    dedupWindowMs: o.dedupWindowMs,
    debounceKey: o.debounceKey,
    debounceMaxWaitMs: o.debounceMaxWaitMs,
    sourceType: o.source?.type,
    sourceId: o.source?.id,
    sourceMethod: o.source?.method,
    // staged jobs have no dependencies (stage refuses them)
    dependsOn: undefined,
    after: undefined,
    onDependencyFailure: undefined,
    dependsOnField: undefined,
  };
}
