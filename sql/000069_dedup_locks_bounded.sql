-- The dedup and debounce keys' locks are bounded in number.
--
-- enqueue_dedup took one advisory lock per distinct key of its call, held to the end of
-- the transaction, and retry_jobs one per key of the jobs it revives. A call of 10 000
-- jobs with distinct keys (one HTTP request of a tenant token with the enqueue scope) held
-- 10 000 entries of the server's shared lock table, which holds some 64 per connection
-- slot in all (max_locks_per_transaction × max_connections): two or three such requests
-- at once failed with "out of shared memory" (a 500), and meanwhile any session of the
-- server that needed a lock could fail the same way.
--
-- Now lock_dedup_keys takes at most 129 locks whatever the call: every call holds one
-- lock of the schema's dedup keys (shared; alone, exclusive, when its keys belong to more
-- than 64 tenants), then one per tenant (shared; exclusive when the call has more than 64
-- keys), then one per key (only when it has 64 or fewer). Any two calls that share a key
-- therefore conflict on a lock before either touches the unique index, as the per-key
-- locks made them, and every call takes its locks in one order (the schema's, the
-- tenants' by hash, the keys' by hash), so calls do not deadlock on them. The price: a
-- call of more than 64 keys waits for, and holds back, its tenants' other deduplicated
-- enqueues until its transaction ends, as one of more than 64 tenants does for all.

CREATE OR REPLACE FUNCTION :SCHEMA.lock_dedup_keys(p_tenants text[], p_keys text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_tenants integer[];
  v_keys integer[];
  v_lock integer;
BEGIN
  SELECT array_agg(DISTINCT hashtext(t.tenant) ORDER BY hashtext(t.tenant)) INTO v_tenants
  FROM unnest(p_tenants) AS t(tenant);
  IF v_tenants IS NULL THEN RETURN; END IF;
  IF cardinality(v_tenants) > 64 THEN
    PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup-all'), 0);
    RETURN;
  END IF;
  PERFORM pg_advisory_xact_lock_shared(hashtext(:SCHEMA_LITERAL || ':dedup-all'), 0);
  SELECT array_agg(DISTINCT hashtext(k.tenant || E'\x1f' || k.key) ORDER BY hashtext(k.tenant || E'\x1f' || k.key))
  INTO v_keys FROM unnest(p_tenants, p_keys) AS k(tenant, key);
  FOREACH v_lock IN ARRAY v_tenants LOOP
    IF cardinality(v_keys) > 64 THEN
      PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup-tenants'), v_lock);
    ELSE
      PERFORM pg_advisory_xact_lock_shared(hashtext(:SCHEMA_LITERAL || ':dedup-tenants'), v_lock);
    END IF;
  END LOOP;
  IF cardinality(v_keys) > 64 THEN RETURN; END IF;
  FOREACH v_lock IN ARRAY v_keys LOOP
    PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup'), v_lock);
  END LOOP;
END $$;

COMMENT ON FUNCTION :SCHEMA.lock_dedup_keys(text[], text[]) IS
'Locks the dedup or debounce keys (p_keys, each of the tenant at the same place in
p_tenants) of an enqueue_dedup or retry_jobs call until its transaction ends, so that two
calls sharing a key never both reach the unique index: one of the schema''s dedup keys,
then one per tenant, then one per key, each in hash order, at most 129 locks. More than
64 tenants: the schema''s lock, exclusive, alone; more than 64 keys: the tenants'' locks,
exclusive, and no key''s.';

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  e record;
  v_id bigint;
  v_run_at timestamptz;
  v_try integer;
BEGIN
  -- The keys are locked first (lock_dedup_keys): two calls with the same keys in opposite
  -- orders would otherwise each wait for the other's entry in the unique index.
  PERFORM :SCHEMA.lock_dedup_keys(k.tenants, k.keys) FROM (
    SELECT array_agg(coalesce(x.tenant, 'default')) AS tenants,
           array_agg(coalesce(x.dedup_key, E'\x1e' || x.debounce_key)) AS keys
    FROM jsonb_to_recordset(p_jobs) AS x(tenant text, dedup_key text, debounce_key text)
    WHERE x.dedup_key IS NOT NULL OR x.debounce_key IS NOT NULL) k;
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

CREATE OR REPLACE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
  v_links jsonb;
BEGIN
  -- the keys of the jobs to revive, locked as enqueue_dedup locks them (lock_dedup_keys);
  -- the statement below reads the jobs holding them after an enqueue under way
  PERFORM :SCHEMA.lock_dedup_keys(k.tenants, k.keys) FROM (
    SELECT array_agg(h.tenant) AS tenants, array_agg(h.dedup_key) AS keys
    FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired') AND h.dedup_key IS NOT NULL) k;
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
