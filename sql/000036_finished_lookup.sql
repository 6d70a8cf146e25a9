-- A tenant's finished jobs, newest first, planned once per connection.
--
-- The lookup (`finishedJobs`, the dashboard's and the HTTP API's list of a tenant's
-- history) was a prepared statement sent by the client, one per form. A prepared
-- statement is planned anew at each call while PostgreSQL judges a generic plan dearer
-- than a custom one, and over day partitions it always does: a custom plan prunes at plan
-- time, a generic one at run time. So every lookup planned a query over every partition
-- (some 3 500 catalog buffers, 2–9 ms with 36 partitions) to run it in 0.3 ms.
-- `npm run bench -- history` (35 partitions): a tenant's last 100 at p95 7–14 ms, where
-- the goal is under 5 ms.
--
-- Here a function keeps a generic plan per connection; its partitions are pruned when it
-- runs (the bounds are parameters and stable expressions). It first reads the last day
-- before `p_before` (or now), whose one or two partitions hold the newest `p_limit` jobs
-- of any busy tenant, and all partitions before `p_before` only when those hold fewer.

CREATE FUNCTION :SCHEMA.finished_jobs(p_tenant text, p_limit integer, p_before timestamptz DEFAULT NULL)
RETURNS SETOF :SCHEMA.job_history LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_upto timestamptz := coalesce(p_before, 'infinity');
  v_recent :SCHEMA.job_history[];
BEGIN
  v_recent := ARRAY(
    SELECT h FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at < v_upto
      AND h.finished_at >= coalesce(p_before, now()) - interval '1 day'
    ORDER BY h.finished_at DESC LIMIT p_limit);
  IF cardinality(v_recent) >= p_limit THEN
    RETURN QUERY SELECT * FROM unnest(v_recent);
  ELSE
    RETURN QUERY SELECT h.* FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at < v_upto
    ORDER BY h.finished_at DESC LIMIT p_limit;
  END IF;
END $$;

COMMENT ON FUNCTION :SCHEMA.finished_jobs(text, integer, timestamptz) IS
'A tenant''s finished jobs, newest first, at most p_limit, finished before p_before if
given. Reads the last day before p_before (or now) first, all partitions only when it
holds fewer. A generic plan kept per connection: a custom plan over every day partition
cost more to make than to run.';
