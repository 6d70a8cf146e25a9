-- The record a job is about (source_type, source_id, source_method): set by
-- `tusk.async(instance).method(...)` and by the `source` option of enqueue. Kept on the
-- job through its life and in history, indexed for "every job of report 42".

ALTER TABLE :SCHEMA.jobs
  ADD COLUMN source_type text,
  ADD COLUMN source_id text,
  ADD COLUMN source_method text,
  -- NOT VALID: every existing row has NULLs; it spares a scan under the table lock
  ADD CONSTRAINT jobs_source_check CHECK (
    (source_type IS NULL AND source_id IS NULL AND source_method IS NULL)
    OR (length(source_type) BETWEEN 1 AND 128 AND length(source_id) BETWEEN 1 AND 256
        AND coalesce(length(source_method) BETWEEN 1 AND 128, true))) NOT VALID;

ALTER TABLE :SCHEMA.job_history
  ADD COLUMN source_type text,
  ADD COLUMN source_id text,
  ADD COLUMN source_method text;

-- Partial: jobs without a source cost nothing here.
CREATE INDEX jobs_source ON :SCHEMA.jobs (source_type, source_id) WHERE source_type IS NOT NULL;
CREATE INDEX job_history_source ON :SCHEMA.job_history (source_type, source_id, finished_at DESC)
  WHERE source_type IS NOT NULL;

-- As in 000002, and the source goes to history with the job.
CREATE OR REPLACE FUNCTION :SCHEMA.finish_jobs(p_state :SCHEMA.job_state, p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  -- opt-in (worker option asyncCommit): lost in a server crash, the jobs run again
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- plpgsql, not sql: PostgreSQL < 18 plans a SQL function's body again on every call
  RETURN QUERY
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, attempt integer, result jsonb, stats jsonb, error jsonb,
      run_ms integer, queued_ms integer)
  ),
  done AS (
    DELETE FROM :SCHEMA.jobs j USING input i
    WHERE j.id = i.id
      AND CASE WHEN i.attempt IS NULL THEN j.state <> 'running'
               ELSE j.state = 'running' AND j.attempts = i.attempt END
    RETURNING j.*, i.result AS new_result, i.stats AS new_stats, i.error AS new_error,
              i.run_ms AS new_run_ms, coalesce(i.queued_ms, 0) AS new_queued_ms
  ),
  history AS (
    INSERT INTO :SCHEMA.job_history (
      id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
      concurrency_key, dedup_key, created_at, run_at, started_at, finished_at, expires_at,
      wait_ms, run_ms, result, errors, stats, source_type, source_id, source_method)
    SELECT d.id, d.tenant, d.queue, d.task, d.payload, d.priority, p_state, d.attempts,
      d.max_attempts, d.concurrency_key, d.dedup_key, d.created_at, d.run_at,
      d.started_at + d.new_queued_ms * interval '1 millisecond',
      now(),
      d.expires_at,
      CASE WHEN d.started_at IS NOT NULL THEN
        greatest(0, (extract(epoch FROM d.started_at - d.run_at) * 1000)::integer + d.new_queued_ms)
      END,
      -- an external consumer acking does not know its run time: from the claim on
      coalesce(d.new_run_ms, CASE WHEN d.started_at IS NOT NULL THEN
        greatest(0, (extract(epoch FROM now() - d.started_at) * 1000)::integer) END),
      d.new_result,
      :SCHEMA.append_error(d.errors, d.new_error),
      CASE WHEN d.new_stats IS NULL THEN d.stats ELSE coalesce(d.stats, '{}') || d.new_stats END,
      d.source_type, d.source_id, d.source_method
    FROM done d
  )
  SELECT d.id FROM done d;
END $$;

-- As in 000003, and a job brought back from history keeps its source.
CREATE OR REPLACE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
RETURNS TABLE (id bigint) LANGUAGE plpgsql AS $$
BEGIN
  RETURN QUERY
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
                              source_type, source_id, source_method)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method
    FROM revived r
    RETURNING jobs.id
  )
  SELECT w.id FROM waiting w UNION ALL SELECT b.id FROM back b;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- As in 000003, with the entries' source_type, source_id and source_method.
CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql AS $$
DECLARE
  e record;
  v_id bigint;
  v_run_at timestamptz;
  v_try integer;
BEGIN
  FOR e IN
    SELECT x.*, coalesce(x.tenant, 'default') AS tenant_name
    FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
           task text, payload jsonb, tenant text, queue text, priority smallint, run_at timestamptz,
           delay_ms bigint, max_attempts integer, concurrency_key text, expires_at timestamptz,
           retry jsonb, dedup_key text, dedup_window_ms bigint, source_type text, source_id text,
           source_method text)) WITH ORDINALITY
         AS x(task, payload, tenant, queue, priority, run_at, delay_ms, max_attempts,
              concurrency_key, expires_at, retry, dedup_key, dedup_window_ms, source_type, source_id,
              source_method, n)
    ORDER BY x.n
  LOOP
    v_run_at := coalesce(e.run_at, now() + coalesce(e.delay_ms, 0) * interval '1 millisecond');
    -- a few tries at most: the matching job may finish before its id is read
    FOR v_try IN 1..5 LOOP
      IF e.dedup_key IS NOT NULL THEN
        UPDATE :SCHEMA.jobs j SET dedup_key = NULL
        WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key
          AND j.created_at < now() - coalesce(e.dedup_window_ms, 600000) * interval '1 millisecond';
      END IF;
      INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, dedup_key,
                                     source_type, source_id, source_method)
      VALUES (e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
              coalesce(e.priority, 0),
              CASE WHEN v_run_at > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
              v_run_at, coalesce(e.max_attempts, 5), coalesce(e.concurrency_key, ''), e.expires_at,
              e.retry, e.dedup_key, e.source_type, e.source_id, e.source_method)
      ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
      RETURNING j.id INTO v_id;
      IF v_id IS NOT NULL THEN
        ord := e.n; id := v_id; deduplicated := false;
        RETURN NEXT;
        EXIT;
      END IF;
      SELECT j.id INTO v_id FROM :SCHEMA.jobs j WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key;
      IF v_id IS NOT NULL THEN
        ord := e.n; id := v_id; deduplicated := true;
        RETURN NEXT;
        EXIT;
      END IF;
      IF v_try = 5 THEN
        RAISE EXCEPTION 'tusk: could not enqueue job % with dedup key %: matching jobs kept finishing', e.n, e.dedup_key;
      END IF;
    END LOOP;
  END LOOP;
END $$;
