-- A retry keeps a dedup key for one job, and waits for an enqueue of the key under way.
--
-- retry_jobs keeps a revived job's dedup key unless another unfinished job of the tenant
-- holds it, read by a NOT EXISTS in the statement that revives. That read sees neither the
-- rows the same statement revives nor an enqueue not yet committed: two finished jobs that
-- held the key in turn, retried together (retryAll), both took it back and the unique index
-- failed the whole retry (nothing retried); a retry racing an enqueue of the key failed
-- once that enqueue committed. Now the keys are locked first, with enqueue_dedup's lock and
-- in its order (an enqueue of the key under way is waited for, and none starts meanwhile),
-- and of the revived jobs with one key only the first, by id, takes it back.

CREATE OR REPLACE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
  v_links jsonb;
  k record;
BEGIN
  -- the keys of the jobs to revive, locked as enqueue_dedup locks them (same lock, same
  -- order); the statement below reads the jobs holding them after an enqueue under way
  FOR k IN
    SELECT DISTINCT hashtext(h.tenant || E'\x1f' || h.dedup_key) AS h
    FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired') AND h.dedup_key IS NOT NULL
    ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup'), k.h);
  END LOOP;
  WITH waiting AS (
    UPDATE :SCHEMA.jobs j SET state = 'available', run_at = now(), attempts = 0
    WHERE j.id = ANY (p_ids) AND j.state = 'failed'
    RETURNING j.id
  ),
  revived AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired')
    RETURNING h.*
  ),
  back AS (
    INSERT INTO :SCHEMA.jobs (id, tenant, queue, task, payload, priority, state, run_at, attempts,
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats,
                              source_type, source_id, source_method, retry, dedup_key,
                              depends_on, on_dependency_failure)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry,
           -- of the jobs revived with one key, the first takes it back, if no job holds it
           CASE WHEN r.first AND NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs o
                                             WHERE o.tenant = r.tenant AND o.dedup_key = r.dedup_key)
                THEN r.dedup_key END,
           r.depends_on, r.on_dependency_failure
    FROM (SELECT v.*, row_number() OVER (PARTITION BY v.tenant, v.dedup_key ORDER BY v.id) = 1 AS first
          FROM revived v) r
    RETURNING jobs.id, jobs.depends_on
  ),
  links AS (
    SELECT jsonb_agg(jsonb_build_object('id', b.id, 'deps', to_jsonb(b.depends_on))) AS links
    FROM back b WHERE b.depends_on IS NOT NULL
  )
  SELECT (SELECT array_agg(w.id) FROM waiting w) || (SELECT array_agg(b.id) FROM back b), (SELECT l.links FROM links l)
  INTO v_ids, v_links;
  IF v_links IS NOT NULL THEN
    PERFORM :SCHEMA.wait_for(v_links, false);
  END IF;
  IF v_ids IS NOT NULL THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
    RETURN QUERY SELECT unnest(v_ids);
  END IF;
END $$;
