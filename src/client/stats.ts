import type { Queryable } from '../db/queryable.js';
import { countJobs, type GroupCount } from '../queries/stats.js';
import { selectTenants } from '../queries/tenants.js';
import type { JobState } from '../types.js';

/** Jobs by state: unfinished ones now, finished ones within the stats window. */
export type StateCounts = Record<JobState, number>;

/** One tenant's, queue's or task's jobs in `Stats`: counts by state, and the oldest waiting. */
export interface GroupStats {
  counts: StateCounts;
  /** Age of the oldest job that could run now, in ms; null if none waits. */
  oldestWaitingMs: number | null;
}

/** What `tusk.stats()` returns. */
export interface Stats {
  /** Finished jobs are counted from this time on. */
  since: Date;
  tenants: Array<GroupStats & { tenant: string; slots: number | null; paused: boolean }>;
  queues: Array<GroupStats & { queue: string }>;
  /** The same by task, across tenants and queues. */
  tasks: Array<GroupStats & { task: string }>;
  total: GroupStats;
}

const emptyCounts = (): StateCounts => ({
  scheduled: 0,
  available: 0,
  running: 0,
  failed: 0,
  succeeded: 0,
  dead: 0,
  cancelled: 0,
  expired: 0,
});

function add(group: GroupStats, row: GroupCount): void {
  group.counts[row.state as JobState] += row.n;
  if (row.oldest_ms !== null) group.oldestWaitingMs = Math.max(group.oldestWaitingMs ?? 0, row.oldest_ms);
}

/** Per tenant, per queue and per task: counts by state and the oldest waiting job's age. */
export async function collectStats(db: Queryable, schema: string, windowMs: number): Promise<Stats> {
  const since = new Date(Date.now() - windowMs);
  const [rows, tenantRows] = await Promise.all([countJobs(db, schema, since), selectTenants(db, schema, null)]);
  const total: GroupStats = { counts: emptyCounts(), oldestWaitingMs: null };
  const tenants = new Map<string, Stats['tenants'][number]>();
  for (const t of tenantRows) {
    tenants.set(t.tenant, {
      tenant: t.tenant,
      slots: t.slots,
      paused: t.paused,
      counts: emptyCounts(),
      oldestWaitingMs: null,
    });
  }
  const queues = new Map<string, Stats['queues'][number]>();
  const tasks = new Map<string, Stats['tasks'][number]>();
  for (const row of rows) {
    if (row.by_task) {
      const name = row.task as string;
      let task = tasks.get(name);
      if (!task) {
        task = { task: name, counts: emptyCounts(), oldestWaitingMs: null };
        tasks.set(name, task);
      }
      add(task, row);
      continue;
    }
    const [tenantName, queueName] = [row.tenant as string, row.queue as string];
    let tenant = tenants.get(tenantName);
    if (!tenant) {
      tenant = { tenant: tenantName, slots: null, paused: false, counts: emptyCounts(), oldestWaitingMs: null };
      tenants.set(tenantName, tenant);
    }
    let queue = queues.get(queueName);
    if (!queue) {
      queue = { queue: queueName, counts: emptyCounts(), oldestWaitingMs: null };
      queues.set(queueName, queue);
    }
    add(tenant, row);
    add(queue, row);
    add(total, row);
  }
  const byName = <T>(a: [string, T], b: [string, T]) => (a[0] < b[0] ? -1 : 1);
  return {
    since,
    tenants: [...tenants.entries()].sort(byName).map(([, v]) => v),
    queues: [...queues.entries()].sort(byName).map(([, v]) => v),
    tasks: [...tasks.entries()].sort(byName).map(([, v]) => v),
    total,
  };
}
