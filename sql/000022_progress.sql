-- Progress: a running job's handler reports how far it got (ctx.progress), a number or a
-- small JSON value; the worker writes it at most once a heartbeat, and it stays with the
-- job in history.
ALTER TABLE :SCHEMA.jobs ADD COLUMN progress jsonb;
ALTER TABLE :SCHEMA.job_history ADD COLUMN progress jsonb;

-- Sets the progress of running jobs, fenced by lease token. Returns how many were set.
CREATE FUNCTION :SCHEMA.set_progress(p_ids bigint[], p_tokens bigint[], p_values jsonb[])
RETURNS integer LANGUAGE sql AS $$
  WITH set AS (
    UPDATE :SCHEMA.jobs j SET progress = x.value
    FROM unnest(p_ids, p_tokens, p_values) AS x(id, token, value)
    WHERE j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
    RETURNING 1)
  SELECT count(*)::integer FROM set
$$;

-- As in 000020, and the progress goes to history with the job.
CREATE OR REPLACE FUNCTION :SCHEMA.finish_jobs(p_state :SCHEMA.job_state, p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  -- opt-in (worker option asyncCommit): lost in a server crash, the jobs run again
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- plpgsql, not sql: PostgreSQL < 18 plans a SQL function's body again on every call
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, token bigint, result jsonb, stats jsonb, error jsonb,
      run_ms bigint, queued_ms bigint, progress jsonb)
  ),
  done AS (
    DELETE FROM :SCHEMA.jobs j USING input i
    WHERE j.id = i.id
      AND CASE WHEN i.token IS NULL THEN j.state <> 'running'
               ELSE j.state = 'running' AND j.lease_token = i.token END
    RETURNING j.*, i.result AS new_result, i.stats AS new_stats, i.error AS new_error,
              i.run_ms AS new_run_ms, coalesce(i.queued_ms, 0) AS new_queued_ms, i.progress AS new_progress
  ),
  history AS (
    INSERT INTO :SCHEMA.job_history (
      id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
      concurrency_key, dedup_key, created_at, run_at, started_at, finished_at, expires_at,
      wait_ms, run_ms, result, errors, stats, source_type, source_id, source_method, retry, progress)
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
      d.source_type, d.source_id, d.source_method, d.retry, coalesce(d.new_progress, d.progress)
    FROM done d
  )
  SELECT array_agg(d.id) INTO v_ids FROM done d;
  IF v_ids IS NULL THEN RETURN; END IF;
  -- for waitFor(): the finished ids, at most 900 a notification (a payload holds 8000 bytes)
  PERFORM pg_notify(:SCHEMA_LITERAL || ':done', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_ids) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 900;
  RETURN QUERY SELECT unnest(v_ids);
END $$;
