-- Two promises of the rate limit and the debounce that held only while nothing changed
-- under them.
--
-- A rate window made longer stopped the tenant. A tenant's row counts its starts in
-- (rate_window, rate_used), the window a number in units of rate_per_ms since the epoch.
-- set_tenant_rate changed rate_per_ms and kept both: after 1 000 ms → 2 000 ms, the stored
-- window (1 795 778 988, in seconds) was far above the current one (897 889 498, in two
-- seconds), rate_left took it for the current window, and a tenant that had used its limit
-- got no start until the new windows caught up (the year 2083; with a minute, never). Now
-- a change of the window, or the rate's removal, starts the count afresh; a change of the
-- limit alone keeps the window's count (a lowered limit holds within the window).
--
-- A debounced job due but not yet made available (its run_at passed; no upkeep, idle
-- worker or paced fetch has promoted it yet) was still 'scheduled', so the next enqueue of
-- its key took it as the burst's job: replaced its payload and moved its start later, where
-- the guide says that once the job is due, the next enqueue starts a new burst. Enqueues
-- coming faster than promotions postponed it again and again. Now the debounce branch first
-- makes the key's due job available (as promote_due_jobs would), so the index no longer
-- matches it and the enqueue makes a new job. enqueue_dedup's body is the baseline's
-- (part 4) but for that statement.

CREATE OR REPLACE FUNCTION :SCHEMA.set_tenant_rate(p_tenant text, p_limit integer, p_per_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), hashtext(p_tenant));
  INSERT INTO :SCHEMA.tenants AS t (tenant, rate_limit, rate_per_ms)
  VALUES (p_tenant, p_limit, CASE WHEN p_limit IS NULL THEN NULL ELSE p_per_ms END)
  ON CONFLICT (tenant) DO UPDATE SET rate_limit = excluded.rate_limit, rate_per_ms = excluded.rate_per_ms,
    -- the stored window is counted in the old unit: a new unit starts a new count
    rate_window = CASE WHEN t.rate_per_ms IS NOT DISTINCT FROM excluded.rate_per_ms THEN t.rate_window ELSE 0 END,
    rate_used = CASE WHEN t.rate_per_ms IS NOT DISTINCT FROM excluded.rate_per_ms THEN t.rate_used ELSE 0 END;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

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
        AND j.waiting_on = 0 AND j.run_at <= clock_timestamp();
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
