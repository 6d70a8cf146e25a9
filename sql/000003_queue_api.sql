-- The queue as SQL for workers in any language (Disque-style API), job
-- deduplication, and re-queueing finished jobs.
--
--   SELECT * FROM tusk.fetch_jobs(10, 30000);            -- lease up to 10 jobs for 30 s
--   SELECT tusk.extend_lease(42, 1, 60000);              -- WORKING: keep it 60 s more
--   SELECT tusk.ack_job(42, 1, '{"ok": true}');          -- ACK (attempt 1 is the lease)
--   SELECT tusk.nack_job(42, 1, 5000, '{"message": "upstream down"}');   -- NACK, retry in 5 s

-- Leases up to p_count available jobs for p_lease_ms. A lease that runs out puts the
-- job back in the queue (the attempt counts). The returned `attempts` is the lease's
-- token: ack_job, nack_job and extend_lease need it.
CREATE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE sql AS $$
  SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant)
$$;

-- Completes a leased job. False if the lease is not held any more (it ran out and the job
-- was leased again, or it was already acked): a lease is acked at most once.
CREATE FUNCTION :SCHEMA.ack_job(p_id bigint, p_attempt integer, p_result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE sql AS $$
  SELECT EXISTS (SELECT 1 FROM :SCHEMA.finish_jobs('succeeded',
    jsonb_build_array(jsonb_build_object('id', p_id, 'attempt', p_attempt, 'result', p_result))))
$$;

-- Gives a leased job back after a failed attempt: it is retried after p_delay_ms, or ends
-- `dead` if it has no attempts left. Returns the job's state after the call, NULL if the
-- lease is not held any more.
CREATE FUNCTION :SCHEMA.nack_job(
  p_id bigint, p_attempt integer, p_delay_ms integer DEFAULT 0, p_error jsonb DEFAULT NULL
) RETURNS :SCHEMA.job_state LANGUAGE plpgsql AS $$
DECLARE
  v_final boolean;
  v_error jsonb := jsonb_build_object('attempt', p_attempt, 'at', now(), 'name', 'Nack',
    'message', 'given back by its consumer') || coalesce(p_error, '{}');
BEGIN
  SELECT attempts >= max_attempts INTO v_final FROM :SCHEMA.jobs
  WHERE id = p_id AND attempts = p_attempt AND state = 'running' FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  IF v_final THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('dead',
      jsonb_build_array(jsonb_build_object('id', p_id, 'attempt', p_attempt, 'error', v_error)));
    RETURN 'dead';
  END IF;
  PERFORM 1 FROM :SCHEMA.requeue_jobs(jsonb_build_array(jsonb_build_object(
    'id', p_id, 'attempt', p_attempt, 'error', v_error, 'delay_ms', greatest(0, coalesce(p_delay_ms, 0)))));
  RETURN CASE WHEN coalesce(p_delay_ms, 0) > 0 THEN 'failed' ELSE 'available' END;
END $$;

-- WORKING: the lease of a leased job now ends p_ms from now. Returns the new
-- end, NULL if the lease is not held any more.
CREATE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_attempt integer, p_ms integer)
RETURNS timestamptz LANGUAGE sql AS $$
  UPDATE :SCHEMA.jobs SET lease_until = now() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND attempts = p_attempt AND state = 'running'
  RETURNING lease_until
$$;

-- Enqueues jobs of which some carry a dedup key: a job whose key matches an unfinished
-- job of the same tenant enqueued within its window is not added; the existing job's id
-- is returned instead (deduplicated = true). Race-free: the unique index on
-- (tenant, dedup_key) decides, not a read before the write (a concurrent enqueue of the
-- same key waits for the first to commit, then finds its job). An unfinished job older
-- than the window gives its key up first, so a new job can take it.
-- p_jobs: the insert statement's array, entries may add `dedup_key` and `dedup_window_ms`.
-- Returns one row per entry, in input order.
CREATE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
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
           retry jsonb, dedup_key text, dedup_window_ms bigint)) WITH ORDINALITY
         AS x(task, payload, tenant, queue, priority, run_at, delay_ms, max_attempts,
              concurrency_key, expires_at, retry, dedup_key, dedup_window_ms, n)
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
                                     concurrency_key, expires_at, retry, dedup_key)
      VALUES (e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
              coalesce(e.priority, 0),
              CASE WHEN v_run_at > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
              v_run_at, coalesce(e.max_attempts, 5), coalesce(e.concurrency_key, ''), e.expires_at,
              e.retry, e.dedup_key)
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

-- Runs finished (dead, cancelled, expired) or failed jobs again: they become available
-- now, with their attempts reset and their errors kept. Returns the ids re-queued.
CREATE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
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
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats
    FROM revived r
    RETURNING jobs.id
  )
  SELECT w.id FROM waiting w UNION ALL SELECT b.id FROM back b;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;
