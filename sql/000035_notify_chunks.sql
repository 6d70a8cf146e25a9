-- Notifications of finished and progressed jobs that fit whatever the ids' length.
--
-- Completions announce their jobs' ids on <schema>:done, and progress on
-- <schema>:progress, for waitFor() and the event stream: comma-separated, 900 ids a
-- notification. A payload must be under 8 000 bytes, and 900 ids fit only while they
-- have 7 digits or fewer. Job ids grow for the life of an install: from 10 000 000 on,
-- a completion of more than 888 jobs failed ("payload string too long"), so every batch
-- of a busy worker (1 000 by default) failed, its jobs' leases ran out, they ran again and
-- failed again. `npm run bench -- history` (10 000 000 rows of history first) drained
-- 50 000 jobs at a few dozen a second that way.
--
-- A job id takes at most 20 characters (a bigint, its sign included): with its comma,
-- 21 bytes, and 380 of them 7 979 bytes. The bodies are those of 000032 but for that
-- bound.

CREATE OR REPLACE FUNCTION :SCHEMA.set_progress(p_ids bigint[], p_tokens bigint[], p_values jsonb[])
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  v_set bigint[];
BEGIN
  WITH set AS (
    UPDATE :SCHEMA.jobs j SET progress = x.value
    FROM unnest(p_ids, p_tokens, p_values) AS x(id, token, value)
    WHERE j.id = ANY (p_ids) AND j.id = x.id AND j.lease_token = x.token
      AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.id)
  SELECT array_agg(set.id ORDER BY set.id) INTO v_set FROM set;
  IF v_set IS NULL THEN RETURN 0; END IF;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':progress', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_set) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 380;
  RETURN cardinality(v_set);
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.move_to_history(p_state :SCHEMA.job_state, p_jobs jsonb)
RETURNS bigint[] LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, token bigint, result jsonb, stats jsonb, error jsonb,
      run_ms bigint, queued_ms bigint, progress jsonb)
  ),
  done AS (
    DELETE FROM :SCHEMA.jobs j USING input i
    WHERE j.id = ANY (ARRAY(SELECT i.id FROM input i)) AND j.id = i.id
      AND CASE WHEN i.token IS NULL THEN j.state <> 'running'
               ELSE j.state = 'running' AND j.lease_token = i.token END
    RETURNING j.*, i.result AS new_result, i.stats AS new_stats, i.error AS new_error,
              i.run_ms AS new_run_ms, coalesce(i.queued_ms, 0) AS new_queued_ms, i.progress AS new_progress
  ),
  history AS (
    INSERT INTO :SCHEMA.job_history (
      id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
      concurrency_key, dedup_key, created_at, run_at, started_at, finished_at, expires_at,
      wait_ms, run_ms, result, errors, stats, source_type, source_id, source_method, retry, progress,
      depends_on, on_dependency_failure)
    SELECT d.id, d.tenant, d.queue, d.task, d.payload, d.priority,
      CASE WHEN p_state = 'dead' AND d.cancel_requested THEN 'cancelled' ELSE p_state END,
      d.attempts, d.max_attempts, d.concurrency_key, d.dedup_key, d.created_at, d.run_at,
      d.started_at + least(d.new_queued_ms, 2147483647) * interval '1 millisecond',
      now(),
      d.expires_at,
      CASE WHEN d.started_at IS NOT NULL THEN :SCHEMA.capped_ms(d.run_at, d.started_at, d.new_queued_ms) END,
      -- an external consumer acking does not know its run time: from the claim on
      CASE WHEN d.new_run_ms IS NOT NULL THEN least(greatest(d.new_run_ms, 0), 2147483647)::integer
           WHEN d.started_at IS NOT NULL THEN :SCHEMA.capped_ms(d.started_at, now()) END,
      d.new_result,
      :SCHEMA.append_error(d.errors, d.new_error),
      CASE WHEN d.new_stats IS NULL THEN d.stats ELSE coalesce(d.stats, '{}') || d.new_stats END,
      d.source_type, d.source_id, d.source_method, d.retry, coalesce(d.new_progress, d.progress),
      d.depends_on, d.on_dependency_failure
    FROM done d
  )
  SELECT array_agg(d.id) INTO v_ids FROM done d;
  IF v_ids IS NULL THEN RETURN NULL; END IF;
  -- for waitFor(): the finished ids, at most 380 a notification (see above)
  PERFORM pg_notify(:SCHEMA_LITERAL || ':done', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_ids) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 380;
  RETURN v_ids;
END $$;

COMMENT ON FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean) IS
'Settles the outcomes of running jobs, fenced by lease token (an outcome of a lease that
was lost changes nothing): moves them to job_history with their result, errors, stats and
progress (move_to_history), then settles their dependents (settle_dependents: counted down
under row locks in id order, made available at zero, or cancelled up a flow when a
dependency failed), and announces their ids on <schema>:done (at most 380 a notification,
which fits any id) for waitFor and the event stream.';
