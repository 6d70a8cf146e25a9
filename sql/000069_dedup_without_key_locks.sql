-- A deduplicated enqueue no longer takes a lock per key.
--
-- enqueue_dedup took one advisory lock per distinct dedup or debounce key of its call, in
-- one order, held to the end of the transaction, so that two calls with the same keys in
-- opposite orders did not each wait for the other's entry in the unique index; retry_jobs
-- took the same locks for the keys of the jobs it revives. A call of 10 000 jobs with
-- distinct keys (one HTTP request of a tenant token with the enqueue scope) held 10 000
-- entries of the server's shared lock table, which holds some 64 per connection slot in
-- all (max_locks_per_transaction × max_connections): three such requests at once failed
-- with "out of shared memory" (a 500), and meanwhile any session of the server that
-- needed a lock could fail the same way.
--
-- Now a call writes its entries in the order of the keys they use (by hash, then the
-- tenant, the kind — dedup or debounce — and the key), the same order for every call,
-- after drawing their ids in input order (the jobs keep the batch's order). A call then
-- waits only on a key another call holds, and the other holds only keys that come before
-- it: no two calls wait on each other, with no lock at all. retry_jobs takes its jobs
-- with a dedup key in the same order — failed jobs' rows locked and updated, revived
-- jobs inserted with ON CONFLICT DO NOTHING (an enqueue of the key under way is waited
-- for, then seen; the job comes back without the key then, as it did when a job held
-- it), a statement per run of one kind (retry_keyed) — and the jobs without a key
-- together after. A transaction that makes several
-- such calls may still meet another in opposite orders across its calls, as before. An
-- enqueue whose key a retry took back while it waited (the job revived keeping its old
-- creation time) does not return that job if it is past the enqueue's window: it clears
-- the key and enqueues, as it did when the lock made it wait for the retry.
-- (A first form of this migration bounded the locks per call instead — a schema lock,
-- then tenant locks, then key locks — and was replaced before landing: a transaction
-- making a small call then a large one upgraded a shared lock and deadlocked against
-- another, and a large call waiting for its tenant's lock held back every deduplicated
-- enqueue of the tenant. A second wrote retry_jobs' failed jobs before its revived ones,
-- holding a key out of order: a retry and an enqueue deadlocked.)

DROP FUNCTION IF EXISTS :SCHEMA.lock_dedup_keys(text[], text[]);

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  e record;
  v_id bigint;
  v_run_at timestamptz;
  v_try integer;
  v_ids bigint[];
  v_window_start timestamptz;
BEGIN
  -- The ids first, in input order: the jobs keep the batch's order (FIFO) whatever order
  -- they are written in. An id not used (a deduplicated entry) is a gap, as a rollback's.
  v_ids := ARRAY(SELECT nextval(':SCHEMA.jobs_id_seq') FROM generate_series(1, jsonb_array_length(p_jobs)));
  -- Then the entries in the order of their keys, the same for every call: a call waits
  -- only on a key another holds, the other holds only keys before it, and so two calls
  -- never wait on each other (the unique indexes on the keys, and the rows of a debounced
  -- key). No lock per key: a call of 10 000 keys held 10 000 entries of the server's lock
  -- table.
  FOR e IN
    SELECT y.* FROM (
      SELECT x.*, coalesce(x.tenant, 'default') AS tenant_name,
             -- the key an entry uses (its debounce key, else its dedup key), told apart by kind
             x.debounce_key IS NOT NULL AS debounced, coalesce(x.debounce_key, x.dedup_key) AS used_key
      FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
             task text, payload jsonb, tenant text, queue text, priority smallint, run_at timestamptz,
             delay_ms bigint, max_attempts integer, concurrency_key text, expires_at timestamptz,
             retry jsonb, dedup_key text, dedup_window_ms bigint, source_type text, source_id text,
             source_method text, debounce_key text, debounce_max_wait_ms bigint)) WITH ORDINALITY
           AS x(task, payload, tenant, queue, priority, run_at, delay_ms, max_attempts,
                concurrency_key, expires_at, retry, dedup_key, dedup_window_ms, source_type, source_id,
                source_method, debounce_key, debounce_max_wait_ms, n)
    ) y
    -- retry_jobs sorts its dedup keys by the same hash (no \x1e for a dedup key)
    ORDER BY hashtext(y.tenant_name || E'\x1f' || CASE WHEN y.debounced THEN E'\x1e' ELSE '' END || y.used_key),
             y.tenant_name, y.debounced, y.used_key, y.n
  LOOP
    v_run_at := coalesce(e.run_at, now() + coalesce(e.delay_ms, 0) * interval '1 millisecond');
    IF e.debounce_key IS NOT NULL THEN
      -- the key's job, if due, is no longer the burst's: made available, it starts as is
      UPDATE :SCHEMA.jobs j SET state = 'available'
      WHERE j.tenant = e.tenant_name AND j.debounce_key = e.debounce_key AND j.state = 'scheduled'
        AND j.waiting_on = 0 AND j.run_at <= now();
      -- debounced: while the key's job is not due, this enqueue replaces its payload and
      -- options and moves its start to v_run_at — but never past its first enqueue's deadline
      INSERT INTO :SCHEMA.jobs AS j (id, tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, debounce_key, debounce_until,
                                     source_type, source_id, source_method)
      VALUES (v_ids[e.n], e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
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
    v_window_start := now() - coalesce(e.dedup_window_ms, 600000) * interval '1 millisecond';
    -- a few tries at most: the matching job may finish before its id is read
    FOR v_try IN 1..5 LOOP
      IF e.dedup_key IS NOT NULL THEN
        UPDATE :SCHEMA.jobs j SET dedup_key = NULL
        WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key AND j.created_at < v_window_start;
      END IF;
      INSERT INTO :SCHEMA.jobs AS j (id, tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, dedup_key,
                                     source_type, source_id, source_method)
      VALUES (v_ids[e.n], e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
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
      -- a holder past this enqueue's window is not one to return (a retry may have
      -- revived an old job with the key since the clearing above): the next try clears it
      SELECT j.id INTO v_id FROM :SCHEMA.jobs j
      WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key AND j.created_at >= v_window_start;
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


-- retry_jobs' jobs with a dedup key, one run of one kind (see retry_jobs): failed jobs
-- (0) made available, their rows locked in the keys' order, or dead, cancelled or expired
-- ones (1) revived, written in the keys' order, the first of a key taking it back unless a
-- job holds it (an enqueue of it under way is waited for, then seen), the others and
-- those without it. Returns the ids it ran again.
CREATE OR REPLACE FUNCTION :SCHEMA.retry_keyed(p_kind integer, p_ids bigint[])
RETURNS bigint[] LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  IF p_kind = 0 THEN
    WITH locked AS (
      SELECT j.id FROM :SCHEMA.jobs j
      WHERE j.id = ANY (p_ids) AND j.state = 'failed'
      ORDER BY hashtext(j.tenant || E'\x1f' || j.dedup_key), j.tenant, j.dedup_key, j.id
      FOR UPDATE
    ),
    waiting AS (
      UPDATE :SCHEMA.jobs j SET state = 'available', run_at = now(), attempts = 0
      FROM locked l WHERE j.id = l.id
      RETURNING j.id
    )
    SELECT coalesce(array_agg(w.id), '{}') INTO v_ids FROM waiting w;
    RETURN v_ids;
  END IF;
  -- (a job with a dedup key has no dependencies: the two do not combine)
  WITH revived AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired')
    RETURNING h.*
  ),
  ranked AS (
    SELECT v.*, row_number() OVER (PARTITION BY v.tenant, v.dedup_key ORDER BY v.id) = 1 AS first
    FROM revived v
  ),
  with_key AS (
    INSERT INTO :SCHEMA.jobs (id, tenant, queue, task, payload, priority, state, run_at, attempts,
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats,
                              source_type, source_id, source_method, retry, dedup_key)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry, r.dedup_key
    FROM ranked r WHERE r.first
    ORDER BY hashtext(r.tenant || E'\x1f' || r.dedup_key), r.tenant, r.dedup_key
    ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING jobs.id
  ),
  without_key AS (
    INSERT INTO :SCHEMA.jobs (id, tenant, queue, task, payload, priority, state, run_at, attempts,
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats,
                              source_type, source_id, source_method, retry)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry
    FROM ranked r WHERE NOT r.first OR r.id NOT IN (SELECT k.id FROM with_key k)
    RETURNING jobs.id
  )
  SELECT coalesce((SELECT array_agg(k.id) FROM with_key k), '{}')
         || coalesce((SELECT array_agg(o.id) FROM without_key o), '{}')
  INTO v_ids;
  RETURN v_ids;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[] := '{}';
  v_links jsonb;
  v_run bigint[] := '{}';
  v_kind integer;
  k record;
BEGIN
  -- The jobs with a dedup key first, in the order enqueue_dedup writes keys in, so that a
  -- retry and an enqueue never wait on each other: a failed job's row (its update holds
  -- the key: an enqueue of it waits for this transaction), a revived job's insert. A run of
  -- jobs of one kind in that order is one statement (retryAll's calls hold one kind).
  FOR k IN
    SELECT x.kind, x.id FROM (
      SELECT 0 AS kind, j.id, j.tenant, j.dedup_key FROM :SCHEMA.jobs j
      WHERE j.id = ANY (p_ids) AND j.state = 'failed' AND j.dedup_key IS NOT NULL
      UNION ALL
      SELECT 1, h.id, h.tenant, h.dedup_key FROM :SCHEMA.job_history h
      WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired') AND h.dedup_key IS NOT NULL
    ) x
    ORDER BY hashtext(x.tenant || E'\x1f' || x.dedup_key), x.tenant, x.dedup_key, x.kind, x.id
  LOOP
    IF k.kind IS DISTINCT FROM v_kind AND v_kind IS NOT NULL THEN
      v_ids := v_ids || :SCHEMA.retry_keyed(v_kind, v_run);
      v_run := '{}';
    END IF;
    v_kind := k.kind;
    v_run := v_run || k.id;
  END LOOP;
  IF v_kind IS NOT NULL THEN
    v_ids := v_ids || :SCHEMA.retry_keyed(v_kind, v_run);
  END IF;
  -- then the jobs without a key, together
  WITH waiting AS (
    UPDATE :SCHEMA.jobs j SET state = 'available', run_at = now(), attempts = 0
    WHERE j.id = ANY (p_ids) AND j.state = 'failed' AND j.dedup_key IS NULL
    RETURNING j.id
  ),
  revived AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired') AND h.dedup_key IS NULL
    RETURNING h.*
  ),
  back AS (
    INSERT INTO :SCHEMA.jobs (id, tenant, queue, task, payload, priority, state, run_at, attempts,
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats,
                              source_type, source_id, source_method, retry, depends_on, on_dependency_failure)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry, r.depends_on, r.on_dependency_failure
    FROM revived r
    RETURNING jobs.id, jobs.depends_on
  ),
  links AS (
    SELECT jsonb_agg(jsonb_build_object('id', b.id, 'deps', to_jsonb(b.depends_on))) AS links
    FROM back b WHERE b.depends_on IS NOT NULL
  )
  SELECT v_ids || coalesce((SELECT array_agg(w.id) FROM waiting w), '{}')
               || coalesce((SELECT array_agg(b.id) FROM back b), '{}'),
         (SELECT l.links FROM links l)
  INTO v_ids, v_links;
  IF v_links IS NOT NULL THEN
    PERFORM :SCHEMA.wait_for(v_links, false);
  END IF;
  IF cardinality(v_ids) > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
    RETURN QUERY SELECT unnest(v_ids);
  END IF;
END $$;

