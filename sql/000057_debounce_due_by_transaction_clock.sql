-- A debounced job is due by the enqueueing transaction's clock (now()), the one its run_at
-- is set by.
--
-- 000054 made an enqueue of a debounce key first make the key's due job available, due
-- being run_at <= clock_timestamp(). But run_at is now() + delay, now() the transaction's
-- start: in a producer transaction open longer than the delay, the job it had just
-- enqueued was due by the clock at once, so each later enqueue of the key in that
-- transaction made a new job (three enqueues, three jobs, where they merged into one
-- before). Due is now run_at <= now(). The body is 000054's but for that comparison.

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  e record;
  v_id bigint;
  v_run_at timestamptz;
  v_try integer;
  k record;
BEGIN
  -- The keys are locked first, all in one order: two calls with the same keys in
  -- opposite orders would otherwise each wait for the other's entry in the unique index.
  FOR k IN
    SELECT DISTINCT hashtext(coalesce(x.tenant, 'default') || E'\x1f' || coalesce(x.dedup_key, E'\x1e' || x.debounce_key)) AS h
    FROM jsonb_to_recordset(p_jobs) AS x(tenant text, dedup_key text, debounce_key text)
    WHERE x.dedup_key IS NOT NULL OR x.debounce_key IS NOT NULL
    ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup'), k.h);
  END LOOP;
  FOR e IN
    SELECT x.*, coalesce(x.tenant, 'default') AS tenant_name
    FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
           task text, payload jsonb, tenant text, queue text, priority smallint, run_at timestamptz,
           delay_ms bigint, max_attempts integer, concurrency_key text, expires_at timestamptz,
           retry jsonb, dedup_key text, dedup_window_ms bigint, source_type text, source_id text,
           source_method text, debounce_key text, debounce_max_wait_ms bigint)) WITH ORDINALITY
         AS x(task, payload, tenant, queue, priority, run_at, delay_ms, max_attempts,
              concurrency_key, expires_at, retry, dedup_key, dedup_window_ms, source_type, source_id,
              source_method, debounce_key, debounce_max_wait_ms, n)
    ORDER BY x.n
  LOOP
    v_run_at := coalesce(e.run_at, now() + coalesce(e.delay_ms, 0) * interval '1 millisecond');
    IF e.debounce_key IS NOT NULL THEN
      -- the key's job, if due, is no longer the burst's: made available, it starts as is
      UPDATE :SCHEMA.jobs j SET state = 'available'
      WHERE j.tenant = e.tenant_name AND j.debounce_key = e.debounce_key AND j.state = 'scheduled'
        AND j.waiting_on = 0 AND j.run_at <= now();
      -- debounced: while the key's job is not due, this enqueue replaces its payload and
      -- options and moves its start to v_run_at — but never past its first enqueue's deadline
      INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, debounce_key, debounce_until,
                                     source_type, source_id, source_method)
      VALUES (e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
              coalesce(e.priority, 0), 'scheduled', v_run_at, coalesce(e.max_attempts, 5),
              coalesce(e.concurrency_key, ''), e.expires_at, e.retry, e.debounce_key,
              now() + e.debounce_max_wait_ms * interval '1 millisecond',
              e.source_type, e.source_id, e.source_method)
      ON CONFLICT (tenant, debounce_key) WHERE debounce_key IS NOT NULL AND state = 'scheduled'
      DO UPDATE SET task = excluded.task, payload = excluded.payload, queue = excluded.queue,
        priority = excluded.priority, max_attempts = excluded.max_attempts,
        concurrency_key = excluded.concurrency_key, expires_at = excluded.expires_at, retry = excluded.retry,
        source_type = excluded.source_type, source_id = excluded.source_id, source_method = excluded.source_method,
        run_at = least(excluded.run_at, coalesce(j.debounce_until, 'infinity'))
      RETURNING j.id, j.xmax <> 0 INTO v_id, deduplicated;
      ord := e.n; id := v_id;
      RETURN NEXT;
      CONTINUE;
    END IF;
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
