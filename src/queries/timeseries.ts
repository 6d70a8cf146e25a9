import type { Queryable } from '../db/queryable.js';
import { ident } from '../db/schema.js';

/** One time bucket: jobs enqueued and finished in it, and timings of the finished ones. */
export interface BucketRow {
  /** Start of the bucket. */
  t: Date;
  enqueued: number;
  succeeded: number;
  dead: number;
  /** Cancelled or expired. */
  other: number;
  wait_p50: number | null;
  wait_p95: number | null;
  run_p50: number | null;
  run_p95: number | null;
}

/**
 * Activity per bucket over the last `windowSeconds`, oldest first, every bucket present
 * (empty ones as zeros). Buckets are aligned to whole multiples of `bucketSeconds`.
 * Reads the history of the window (the BRIN index on finished_at skips older rows) and
 * scans the unfinished jobs for the enqueue counts.
 */
export async function activityBuckets(
  db: Queryable,
  schema: string,
  args: { windowSeconds: number; bucketSeconds: number; tenant: string | null; queue: string | null },
): Promise<BucketRow[]> {
  const s = ident(schema);
  const filter = `($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR queue = $4)`;
  const { rows } = await db.query<BucketRow>(
    `WITH p AS (SELECT make_interval(secs => $2) AS size,
                       date_bin(make_interval(secs => $2), now() - make_interval(secs => $1), 'epoch') AS since),
     buckets AS (SELECT generate_series(p.since, now(), p.size) AS t FROM p),
     finished AS (
       SELECT date_bin(p.size, h.finished_at, 'epoch') AS t,
              count(*) FILTER (WHERE h.state = 'succeeded')::integer AS succeeded,
              count(*) FILTER (WHERE h.state = 'dead')::integer AS dead,
              count(*) FILTER (WHERE h.state IN ('cancelled', 'expired'))::integer AS other,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY h.wait_ms) AS wait_p50,
              percentile_cont(0.95) WITHIN GROUP (ORDER BY h.wait_ms) AS wait_p95,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY h.run_ms) AS run_p50,
              percentile_cont(0.95) WITHIN GROUP (ORDER BY h.run_ms) AS run_p95
       FROM ${s}.job_history h, p WHERE h.finished_at >= p.since AND ${filter} GROUP BY 1),
     created AS (
       SELECT date_bin(p.size, c.created_at, 'epoch') AS t, count(*)::integer AS n
       FROM (SELECT created_at FROM ${s}.jobs, p WHERE created_at >= p.since AND ${filter}
             UNION ALL
             SELECT created_at FROM ${s}.job_history, p
             WHERE finished_at >= p.since AND created_at >= p.since AND ${filter}) c, p
       GROUP BY 1)
     SELECT b.t, coalesce(c.n, 0) AS enqueued, coalesce(f.succeeded, 0) AS succeeded,
            coalesce(f.dead, 0) AS dead, coalesce(f.other, 0) AS other,
            f.wait_p50, f.wait_p95, f.run_p50, f.run_p95
     FROM buckets b LEFT JOIN finished f ON f.t = b.t LEFT JOIN created c ON c.t = b.t
     ORDER BY b.t`,
    [args.windowSeconds, args.bucketSeconds, args.tenant, args.queue],
  );
  return rows;
}
