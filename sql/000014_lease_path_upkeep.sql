-- Consumers of the lease API (SQL, HTTP) may run with no Tusk process at all: fetch_jobs
-- itself gives back the expired leases of what it reads and promotes due jobs, so delays
-- and crash recovery hold without a worker. The rest of the upkeep (dead workers, expiry,
-- schedules, history) runs in any long-lived Tusk process, or `tusk upkeep`.

-- Returns to the queue (or to `dead`, when out of attempts) those of p_ids that are
-- running and lost: lease expired, worker in p_dead_workers, or worker forgotten. Rows
-- another transaction holds are skipped (it is finishing them). The attempt counts.
CREATE FUNCTION :SCHEMA.requeue_lost(p_ids bigint[], p_dead_workers integer[] DEFAULT '{}')
RETURNS TABLE (released integer, dead integer) LANGUAGE plpgsql AS $$
DECLARE
  v_retry jsonb;
  v_final jsonb;
BEGIN
  WITH lost AS (
    SELECT j.id, j.attempts, j.lease_token, j.attempts >= j.max_attempts AS final,
      CASE WHEN j.lease_until < now() THEN 'lease expired before the job finished'
           ELSE 'worker ' || j.locked_by || ' died while running the job' END AS why
    FROM :SCHEMA.jobs j
    WHERE j.id = ANY (p_ids) AND j.state = 'running'
      AND (j.lease_until < now()
           OR j.locked_by = ANY (p_dead_workers)
           OR (j.locked_by IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM :SCHEMA.workers w WHERE w.id = j.locked_by)))
    FOR UPDATE OF j SKIP LOCKED
  )
  SELECT
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE NOT final),
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE final)
  INTO v_retry, v_final
  FROM (SELECT l.*, jsonb_build_object('attempt', l.attempts, 'message', l.why,
          'name', 'LostJobError', 'at', now()) AS e FROM lost l) x;
  -- only when there is something to do: finishing touches job_history, which a fetch
  -- with no expired lease in sight must not wait for
  RETURN QUERY SELECT
    CASE WHEN v_retry IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.requeue_jobs(v_retry)) END,
    CASE WHEN v_final IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.finish_jobs('dead', v_final)) END;
END $$;

-- As in 000013, through requeue_lost.
CREATE OR REPLACE FUNCTION :SCHEMA.reap(p_grace_ms integer DEFAULT 10000)
RETURNS TABLE (released integer, dead integer, workers integer) LANGUAGE plpgsql AS $$
DECLARE
  v_live integer[];
  v_dead_workers integer[] := '{}';
  r record;
  v_forgotten integer;
BEGIN
  v_live := :SCHEMA.live_worker_ids();
  SELECT coalesce(array_agg(w.id), '{}') INTO v_dead_workers
  FROM :SCHEMA.workers w
  WHERE w.id <> ALL (v_live)
    AND (w.heartbeat_at > pg_postmaster_start_time()
         OR clock_timestamp() - pg_postmaster_start_time() > p_grace_ms * interval '1 millisecond');
  SELECT * INTO r FROM :SCHEMA.requeue_lost(
    ARRAY(SELECT j.id FROM :SCHEMA.jobs j WHERE j.state = 'running'), v_dead_workers);

  DELETE FROM :SCHEMA.workers w
  WHERE w.id = ANY (v_dead_workers)
    AND NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs j WHERE j.state = 'running' AND j.locked_by = w.id);
  GET DIAGNOSTICS v_forgotten = ROW_COUNT;
  RETURN QUERY SELECT r.released, r.dead, v_forgotten;
END $$;

-- Leases up to p_count available jobs for p_lease_ms. A lease that runs out puts the job
-- back in the queue (the attempt counts). Each row's `lease_token` is the lease's token:
-- ack_job, nack_job and extend_lease need it. First, up to 100 expired leases of the
-- asked queue and tenant go back to the queue, and up to 1 000 due jobs are promoted.
CREATE OR REPLACE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql AS $$
BEGIN
  PERFORM :SCHEMA.requeue_lost(ARRAY(
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state = 'running' AND j.lease_until < now()
      AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
    LIMIT 100));
  PERFORM :SCHEMA.promote_due_jobs(1000);
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;
