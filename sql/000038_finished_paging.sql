-- A tenant's finished jobs, paged by the last job of the previous page.
--
-- `finishedJobs({ before })` took a date and returned the jobs finished strictly before
-- it, so a caller paged by passing the last job's `finishedAt`. That skipped jobs: a
-- completion batch gives all its jobs (up to 2 000) its transaction's time, so a page
-- that ended inside a batch lost the rest of it, and a Date keeps whole milliseconds of a
-- time stored in microseconds, so the jobs of the same millisecond finished before the
-- last one were lost too.
--
-- Now the order is (finished_at, id), newest first, and `p_before_id` names the last job
-- of the previous page: the page starts after it in that order, at its exact time, read
-- from the job's row (within the millisecond `p_before` gives, so one partition is
-- probed). A job no longer there (retried, deleted or pruned between two pages) leaves
-- its millisecond and its id: the page goes on with the jobs of that millisecond below
-- its id, then the earlier ones. That is exact for the rest of a completion batch (one
-- instant); if jobs of two instants share that millisecond, one of the later instant
-- with a lower id is shown again and one of the earlier instant with a higher id skipped.
-- Without `p_before_id`, `p_before` means what it did.

DROP FUNCTION :SCHEMA.finished_jobs(text, integer, timestamptz);

CREATE FUNCTION :SCHEMA.finished_jobs(
  p_tenant text, p_limit integer, p_before timestamptz DEFAULT NULL, p_before_id bigint DEFAULT NULL)
RETURNS SETOF :SCHEMA.job_history LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  -- a job is on the page when finished before v_below, or by v_upto with an id below
  -- v_id: without a cursor job, only the first (v_upto before any time)
  v_below timestamptz := coalesce(p_before, 'infinity');
  v_upto timestamptz := '-infinity';
  v_id bigint := 0;
  v_recent :SCHEMA.job_history[];
BEGIN
  IF p_before_id IS NOT NULL THEN
    IF p_before IS NULL THEN
      RAISE EXCEPTION 'finished_jobs: p_before_id needs p_before, the job''s finished_at (to the millisecond)'
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_id := p_before_id;
    SELECT h.finished_at INTO v_upto FROM :SCHEMA.job_history h
    WHERE h.id = p_before_id AND h.finished_at >= p_before
      AND h.finished_at < p_before + interval '1 millisecond';
    IF FOUND THEN
      v_below := v_upto;
    ELSE
      v_upto := p_before + interval '999 microseconds';
    END IF;
  END IF;
  -- the greater bound limits the index scan; the rest is a filter on its rows
  v_recent := ARRAY(
    SELECT h FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at <= greatest(v_below, v_upto)
      AND (h.finished_at < v_below OR (h.finished_at <= v_upto AND h.id < v_id))
      AND h.finished_at >= coalesce(p_before, now()) - interval '1 day'
    ORDER BY h.finished_at DESC, h.id DESC LIMIT p_limit);
  IF cardinality(v_recent) >= p_limit THEN
    RETURN QUERY SELECT * FROM unnest(v_recent);
  ELSE
    RETURN QUERY SELECT h.* FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at <= greatest(v_below, v_upto)
      AND (h.finished_at < v_below OR (h.finished_at <= v_upto AND h.id < v_id))
    ORDER BY h.finished_at DESC, h.id DESC LIMIT p_limit;
  END IF;
END $$;

COMMENT ON FUNCTION :SCHEMA.finished_jobs(text, integer, timestamptz, bigint) IS
'A tenant''s finished jobs, newest first by (finished_at, id), at most p_limit: after the
job p_before_id (which finished in the millisecond from p_before) if given, else finished
before p_before if given. A cursor job no longer there: the jobs of its millisecond below
its id, then the earlier ones. Reads the last day before p_before (or now) first, all
partitions only when it holds fewer. A generic plan kept per connection: a custom plan
over every day partition cost more to make than to run.';
