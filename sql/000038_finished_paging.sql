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
-- probed). A job no longer there (pruned) leaves `p_before` alone: the page starts before
-- its millisecond. Without `p_before_id`, `p_before` means what it did.

DROP FUNCTION :SCHEMA.finished_jobs(text, integer, timestamptz);

CREATE FUNCTION :SCHEMA.finished_jobs(
  p_tenant text, p_limit integer, p_before timestamptz DEFAULT NULL, p_before_id bigint DEFAULT NULL)
RETURNS SETOF :SCHEMA.job_history LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_at timestamptz := coalesce(p_before, 'infinity');
  -- below every id: a time alone excludes its own instant
  v_id bigint := -9223372036854775808;
  v_recent :SCHEMA.job_history[];
BEGIN
  IF p_before IS NOT NULL AND p_before_id IS NOT NULL THEN
    SELECT h.finished_at, h.id INTO v_at, v_id FROM :SCHEMA.job_history h
    WHERE h.id = p_before_id AND h.finished_at >= p_before
      AND h.finished_at < p_before + interval '1 millisecond';
    IF NOT FOUND THEN
      v_at := p_before;
      v_id := -9223372036854775808;
    END IF;
  END IF;
  -- finished_at <= v_at bounds the index scan; the row comparison breaks the tie by id
  v_recent := ARRAY(
    SELECT h FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at <= v_at AND (h.finished_at, h.id) < (v_at, v_id)
      AND h.finished_at >= coalesce(p_before, now()) - interval '1 day'
    ORDER BY h.finished_at DESC, h.id DESC LIMIT p_limit);
  IF cardinality(v_recent) >= p_limit THEN
    RETURN QUERY SELECT * FROM unnest(v_recent);
  ELSE
    RETURN QUERY SELECT h.* FROM :SCHEMA.job_history h
    WHERE h.tenant = p_tenant AND h.finished_at <= v_at AND (h.finished_at, h.id) < (v_at, v_id)
    ORDER BY h.finished_at DESC, h.id DESC LIMIT p_limit;
  END IF;
END $$;

COMMENT ON FUNCTION :SCHEMA.finished_jobs(text, integer, timestamptz, bigint) IS
'A tenant''s finished jobs, newest first by (finished_at, id), at most p_limit: after the
job p_before_id (which finished in the millisecond from p_before) if given, else finished
before p_before if given. Reads the last day before p_before (or now) first, all
partitions only when it holds fewer. A generic plan kept per connection: a custom plan
over every day partition cost more to make than to run.';
