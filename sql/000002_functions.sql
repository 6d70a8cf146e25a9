-- The statements that change job state.
--
-- Tenant slots are exact without a counter: a tenant's running jobs are counted by the
-- claim itself, in a statement that starts after the claim has locked the tenant's row.
-- Claims for one tenant are serialized by that lock, and the fresh snapshot sees every
-- claim that committed before it, so the count is exact (a completion still in flight
-- only makes it conservative). Nothing else makes jobs running, so nothing else touches
-- tenant rows: completions never contend with claims, and there is no counter to drift.

CREATE TYPE :SCHEMA.lane AS (queue text, tenant text, concurrency_key text);

-- Lanes (queue, tenant, concurrency key) that have available jobs, found by a loose
-- index scan on jobs_ready: one index descent per lane, whatever the backlog.
CREATE FUNCTION :SCHEMA.ready_lanes(p_queues text[], p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_all :SCHEMA.lane[];
  v_some :SCHEMA.lane[];
  v_queue text;
BEGIN
  IF p_queues IS NULL THEN
    WITH RECURSIVE l AS (
      (SELECT j.queue, j.tenant, j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available'
        ORDER BY j.queue, j.tenant, j.concurrency_key LIMIT 1)
      UNION ALL
      SELECT n.queue, n.tenant, n.concurrency_key FROM l CROSS JOIN LATERAL (
        SELECT j.queue, j.tenant, j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available'
          AND (j.queue, j.tenant, j.concurrency_key) > (l.queue, l.tenant, l.concurrency_key)
        ORDER BY j.queue, j.tenant, j.concurrency_key LIMIT 1) n
    )
    SELECT array_agg(ROW(l.queue, l.tenant, l.concurrency_key):::SCHEMA.lane) INTO v_all
    FROM l WHERE p_tenant IS NULL OR l.tenant = p_tenant;
    RETURN v_all;
  END IF;
  FOREACH v_queue IN ARRAY p_queues LOOP
    WITH RECURSIVE l AS (
      (SELECT j.tenant, j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = v_queue
          AND (p_tenant IS NULL OR j.tenant = p_tenant)
        ORDER BY j.tenant, j.concurrency_key LIMIT 1)
      UNION ALL
      SELECT n.tenant, n.concurrency_key FROM l CROSS JOIN LATERAL (
        SELECT j.tenant, j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = v_queue
          AND (j.tenant, j.concurrency_key) > (l.tenant, l.concurrency_key)
          AND (p_tenant IS NULL OR j.tenant = p_tenant)
        ORDER BY j.tenant, j.concurrency_key LIMIT 1) n
    )
    SELECT array_agg(ROW(v_queue, l.tenant, l.concurrency_key):::SCHEMA.lane) INTO v_some FROM l;
    v_all := v_all || v_some;
  END LOOP;
  RETURN v_all;
END $$;

-- Advisory lock keys: (tenant_lock_space, hashtext(tenant)) per tenant, and
-- (tenant_lock_space, 0) for the default slots. Claims of unlimited tenants hold them
-- shared; a change of limits holds them exclusively, so it waits for those claims.
CREATE FUNCTION :SCHEMA.tenant_lock_space() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(:SCHEMA_LITERAL || ':tenants') $$;

-- Changes a tenant's settings (NULL leaves a setting as it is; p_reset_* sets it to
-- NULL). Waits for claims in flight that treat the tenant as unlimited.
CREATE FUNCTION :SCHEMA.set_tenant(
  p_tenant text, p_slots integer, p_reset_slots boolean, p_per_key integer,
  p_reset_per_key boolean, p_paused boolean
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), hashtext(p_tenant));
  INSERT INTO :SCHEMA.tenants AS t (tenant, slots, per_key, paused)
  VALUES (p_tenant, p_slots, p_per_key, coalesce(p_paused, false))
  ON CONFLICT (tenant) DO UPDATE SET
    slots = CASE WHEN p_reset_slots THEN NULL ELSE coalesce(p_slots, t.slots) END,
    per_key = CASE WHEN p_reset_per_key THEN NULL ELSE coalesce(p_per_key, t.per_key) END,
    paused = coalesce(p_paused, t.paused);
  -- wakes idle workers: a resume or more slots are used at once
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

-- Sets the slots of tenants without their own; waits for claims in flight that rely on it.
CREATE FUNCTION :SCHEMA.set_default_slots(p_slots integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), 0);
  UPDATE :SCHEMA.config SET default_slots = p_slots;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

-- Claims up to p_limit available jobs for worker p_worker (NULL for an external lease).
-- Tenants with a free slot are served least recently served first, round-robin by job:
-- the first job of every eligible tenant, then the second, ... Inside a tenant, FIFO by
-- (priority, id); a concurrency key gets at most the tenant's per_key running jobs.
-- Lanes with no free slot are never scanned; a tenant row locked by another claim is
-- skipped, so claimers never wait on each other.
--
-- Exactness. A limited tenant (slots, or a per-key limit) is claimed only under its row
-- lock (FOR UPDATE SKIP LOCKED), by a statement that starts after the lock is taken: it
-- sees every claim committed before, so its count of running jobs is exact. An
-- unlimited tenant needs no count; its claims share an advisory lock instead, so they
-- run in parallel (their jobs are picked with SKIP LOCKED), while a change of its limits
-- waits for them (set_tenant, set_default_slots) and the claim re-checks the limits after
-- taking the lock.
--
-- Measured (npm run bench -- fairness, PostgreSQL 15, 2 cores): tenant A floods 1 000 000
-- jobs with 5 slots, 50 tenants have 1 job each, 2 processes x 16 workers. One claim takes
-- 1.87 ms with A at 1 000 jobs and 2.15 ms at 1 000 000 (1.15x); the small tenants' jobs
-- start p50 1.9 ms, p99 6.7 ms after enqueue. a claim query without lanes in the same run: 0.6 ms
-- -> 161 ms per claim (270x) and p99 4.4 s; a plain global FIFO starts none in 30 s.
-- A per-tenant `running` counter decremented by completions was the alternative; it
-- makes completions lock tenant rows that claims then skip, for no gain in exactness.
CREATE FUNCTION :SCHEMA.claim_jobs(
  p_worker integer,
  p_limit integer,
  p_lease_ms integer,
  p_queues text[] DEFAULT NULL,
  p_tenant text DEFAULT NULL,
  p_max_tenants integer DEFAULT 64,
  p_async_commit boolean DEFAULT false
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
-- Row estimates of unnest() make these plans look expensive: JIT would cost ~0.5 s a
-- call, and plpgsql would build a fresh custom plan on every call. Their cost does not
-- depend on the parameters' values, so one generic plan per session serves.
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_lanes :SCHEMA.lane[];
  v_candidates text[];
  v_exclusive text[];
  v_shared text[];
  v_ids bigint[];
  v_tids tid[];
  v_default integer;
  v_space integer := :SCHEMA.tenant_lock_space();
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- A worker's claim (its own transaction) need not wait for its WAL to reach disk: lost
  -- in a crash, the jobs are simply available again with their old attempt number (a
  -- completion of the lost claim is then fenced out). Enqueues and completions keep
  -- synchronous commits; a caller's own transaction is left alone (the default).
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  v_lanes := :SCHEMA.ready_lanes(p_queues, p_tenant);
  IF v_lanes IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT l.tenant) INTO v_candidates FROM unnest(v_lanes) l;

  -- Tenants first seen in jobs (SQL inserts, new tenants) get their row here, not at
  -- enqueue, so enqueue never takes a lock a caller's transaction would hold.
  INSERT INTO :SCHEMA.tenants (tenant)
  SELECT c.tenant FROM unnest(v_candidates) c(tenant)
  WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.tenants t WHERE t.tenant = c.tenant)
  ON CONFLICT DO NOTHING;
  SELECT default_slots INTO v_default FROM :SCHEMA.config;

  -- 1a. Limited tenants that look eligible (not paused, a slot free by this snapshot):
  --     lock their rows, least recently served first. Full tenants are filtered out
  --     before the LIMIT, so they cannot crowd out tenants with room.
  SELECT coalesce(array_agg(e.tenant), '{}') INTO v_exclusive FROM (
    SELECT t.tenant FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND (t.per_key IS NOT NULL OR coalesce(t.slots, v_default) IS NOT NULL)
      AND (coalesce(t.slots, v_default) IS NULL
           OR coalesce(t.slots, v_default) > (
             SELECT count(*) FROM :SCHEMA.jobs r WHERE r.state = 'running' AND r.tenant = t.tenant))
    ORDER BY t.last_served_at, t.tenant
    LIMIT least(p_max_tenants, p_limit)
    FOR UPDATE OF t SKIP LOCKED
  ) e;

  -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
  SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
    SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL
    ORDER BY t.last_served_at, t.tenant
    LIMIT least(p_max_tenants, p_limit)
  ) u
  WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
    AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
  IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

  -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
  --    exactly, re-check that the shared ones are still unlimited, and choose the jobs
  --    in round-robin order.
  SELECT coalesce(array_agg(c.id ORDER BY c.rn, c.last_served_at, c.tenant), '{}'), array_agg(c.tid)
  INTO v_ids, v_tids FROM (
    -- MATERIALIZED: computed once, not once per picked row
    WITH elig AS MATERIALIZED (
      SELECT t.tenant, t.last_served_at, t.per_key, t.tenant = ANY (v_shared) AS shared,
             CASE WHEN lim.n IS NULL THEN p_limit
                  ELSE least(p_limit, lim.n - (
                    SELECT count(*)::integer FROM :SCHEMA.jobs r
                    WHERE r.state = 'running' AND r.tenant = t.tenant)) END AS free
      FROM :SCHEMA.tenants t
      CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
      WHERE t.tenant = ANY (v_exclusive)
         OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND NOT t.paused)
    ),
    lanes AS MATERIALIZED (
      SELECT l.queue, l.tenant, l.concurrency_key, e.free, e.last_served_at, e.shared,
             CASE WHEN l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                  ELSE e.per_key - (
                    SELECT count(*)::integer FROM :SCHEMA.jobs r
                    WHERE r.state = 'running' AND r.tenant = l.tenant
                      AND r.concurrency_key = l.concurrency_key) END AS key_free
      FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant
      WHERE e.free > 0
    ),
    picked AS (
      -- limited tenants: no row locks, since no other claim can pick their jobs
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, n.key_free, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND j.concurrency_key = n.concurrency_key
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT greatest(0, least(n.free, coalesce(n.key_free, n.free)))
      ) p
      WHERE NOT n.shared
      UNION ALL
      -- unlimited tenants: claims run in parallel, so lock the jobs (SKIP LOCKED)
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, NULL, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND j.concurrency_key = n.concurrency_key
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT n.free
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    keyed AS (  -- a key's lanes in several queues share its limit
      SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.concurrency_key ORDER BY p.priority, p.id) AS rk
      FROM picked p
    ),
    ranked AS (
      SELECT k.id, k.tid, k.tenant, k.free, k.last_served_at,
             row_number() OVER (PARTITION BY k.tenant ORDER BY k.priority, k.id) AS rn
      FROM keyed k WHERE k.key_free IS NULL OR k.rk <= k.key_free
    )
    SELECT r.id, r.tid, r.rn, r.last_served_at, r.tenant FROM ranked r WHERE r.rn <= r.free
    ORDER BY r.rn, r.last_served_at, r.tenant
    LIMIT p_limit
  ) c;
  IF cardinality(v_ids) = 0 THEN RETURN; END IF;

  -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
  --    expired) has moved or is no longer available, and is left out. last_served_at of
  --    an unlimited tenant is updated only if no parallel claim is updating it already.
  RETURN QUERY
  WITH claimed AS (
    UPDATE :SCHEMA.jobs j
    SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
        started_at = now(), lease_until = now() + p_lease_ms * interval '1 millisecond'
    WHERE j.ctid = ANY (v_tids) AND j.state = 'available'
    RETURNING j.*
  ),
  served AS (
    UPDATE :SCHEMA.tenants t SET last_served_at = clock_timestamp()
    WHERE t.tenant IN (
      SELECT s.tenant FROM :SCHEMA.tenants s
      WHERE s.tenant IN (SELECT c.tenant FROM claimed c)
      FOR NO KEY UPDATE SKIP LOCKED)
  )
  SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
  ORDER BY o.ord;
END $$;

-- Appends one attempt's error to a job's error list, keeping the last 50.
-- STABLE like jsonb_build_array: a function claiming more is not inlined, and then
-- runs as a query of its own for every row.
CREATE FUNCTION :SCHEMA.append_error(p_errors jsonb, p_error jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_error IS NULL THEN p_errors
    WHEN jsonb_array_length(coalesce(p_errors, '[]')) >= 50 THEN (p_errors - 0) || jsonb_build_array(p_error)
    ELSE coalesce(p_errors, '[]') || jsonb_build_array(p_error)
  END
$$;

-- Moves jobs to history in final state p_state, in one statement.
-- p_jobs: [{id, attempt?, result?, stats?, error?, run_ms?, queued_ms?}]
-- A running job is finished only with its attempt number (the fencing token of its
-- claim): a worker whose lease ran out and was re-claimed cannot finish it. A job
-- given without attempt is finished only if it is not running.
-- Returns the ids that were finished.
CREATE FUNCTION :SCHEMA.finish_jobs(p_state :SCHEMA.job_state, p_jobs jsonb, p_async_commit boolean DEFAULT false)
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
      wait_ms, run_ms, result, errors, stats)
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
      CASE WHEN d.new_stats IS NULL THEN d.stats ELSE coalesce(d.stats, '{}') || d.new_stats END
    FROM done d
  )
  SELECT d.id FROM done d;
END $$;

-- Puts running jobs back in the queue: after a failed attempt (error, delay_ms), on
-- graceful stop (refund: the attempt is not counted, the job never started), or when
-- a lease is given back. Fenced by attempt like finish_jobs.
-- p_jobs: [{id, attempt, delay_ms?, error?, queue?, stats?, refund?}]
CREATE FUNCTION :SCHEMA.requeue_jobs(p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, attempt integer, delay_ms bigint, error jsonb, queue text, stats jsonb,
      refund boolean)
  ),
  moved AS (
    UPDATE :SCHEMA.jobs j SET
      state = CASE WHEN coalesce(i.delay_ms, 0) > 0 THEN 'failed':::SCHEMA.job_state
                   ELSE 'available':::SCHEMA.job_state END,
      run_at = now() + coalesce(i.delay_ms, 0) * interval '1 millisecond',
      attempts = j.attempts - CASE WHEN coalesce(i.refund, false) THEN 1 ELSE 0 END,
      locked_by = NULL,
      lease_until = NULL,
      cancel_requested = false,
      queue = coalesce(i.queue, j.queue),
      errors = :SCHEMA.append_error(j.errors, i.error),
      stats = CASE WHEN i.stats IS NULL THEN j.stats ELSE coalesce(j.stats, '{}') || i.stats END
    FROM input i
    WHERE j.id = i.id AND j.state = 'running' AND j.attempts = i.attempt
    RETURNING j.id
  )
  SELECT m.id FROM moved m;
  IF FOUND THEN
    -- wakes idle workers: to claim what is available, or to time the next retry
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- Makes due scheduled jobs and due retries available. Returns how many.
CREATE FUNCTION :SCHEMA.promote_due_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  WITH due AS (
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state IN ('scheduled', 'failed') AND j.run_at <= clock_timestamp()
    ORDER BY j.run_at LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  )
  UPDATE :SCHEMA.jobs j SET state = 'available' FROM due WHERE j.id = due.id;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
  RETURN n;
END $$;

-- Finishes as `expired` the waiting jobs whose expires_at has passed. Returns how many.
CREATE FUNCTION :SCHEMA.expire_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE sql AS $$
  SELECT count(*)::integer FROM :SCHEMA.finish_jobs('expired', (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', e.id)), '[]')
    FROM (SELECT j.id FROM :SCHEMA.jobs j
          WHERE j.expires_at <= now() AND j.state <> 'running'
          ORDER BY j.expires_at LIMIT p_limit) e))
$$;

-- Worker ids are session advisory locks (hashtext(schema), id) on the worker's
-- listening connection: the lock disappears the moment that connection does.
CREATE FUNCTION :SCHEMA.live_worker_ids()
RETURNS integer[] LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(l.objid::bigint::integer), '{}')
  FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.classid = hashtext(:SCHEMA_LITERAL)::oid
$$;

-- Registers a worker (or re-registers it under its old id after a reconnect) and takes
-- its lock. Returns the worker id; a new id if the old one is still locked elsewhere.
CREATE FUNCTION :SCHEMA.register_worker(
  p_id integer, p_name text, p_host text, p_pid integer, p_queues text[],
  p_concurrency integer, p_version text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_id integer := p_id;
BEGIN
  IF v_id IS NOT NULL AND NOT pg_try_advisory_lock(hashtext(:SCHEMA_LITERAL), v_id) THEN
    v_id := NULL;
  END IF;
  IF v_id IS NULL THEN
    INSERT INTO :SCHEMA.workers (name, host, pid, queues, concurrency, version)
    VALUES (p_name, p_host, p_pid, p_queues, p_concurrency, p_version)
    RETURNING id INTO v_id;
    PERFORM pg_advisory_lock(hashtext(:SCHEMA_LITERAL), v_id);
  ELSE
    INSERT INTO :SCHEMA.workers (id, name, host, pid, queues, concurrency, version)
    VALUES (v_id, p_name, p_host, p_pid, p_queues, p_concurrency, p_version)
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now();
  END IF;
  RETURN v_id;
END $$;

CREATE FUNCTION :SCHEMA.unregister_worker(p_id integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM :SCHEMA.workers WHERE id = p_id;
  PERFORM pg_advisory_unlock(hashtext(:SCHEMA_LITERAL), p_id);
END $$;

-- Worker heartbeat: marks the worker alive, extends the leases of the jobs it holds
-- (when past half their length), and reports which of them were cancelled or lost.
CREATE FUNCTION :SCHEMA.heartbeat(p_worker integer, p_jobs bigint[], p_lease_ms integer)
RETURNS TABLE (alive boolean, cancelled bigint[], lost bigint[]) LANGUAGE plpgsql AS $$
DECLARE
  v_alive boolean;
  v_held bigint[];
BEGIN
  UPDATE :SCHEMA.workers SET heartbeat_at = now() WHERE id = p_worker;
  v_alive := FOUND;
  UPDATE :SCHEMA.jobs j SET lease_until = now() + p_lease_ms * interval '1 millisecond'
  WHERE j.id = ANY (p_jobs) AND j.state = 'running' AND j.locked_by = p_worker
    AND j.lease_until < now() + p_lease_ms * interval '0.5 millisecond';
  SELECT coalesce(array_agg(j.id), '{}') INTO v_held FROM :SCHEMA.jobs j
  WHERE j.id = ANY (p_jobs) AND j.state = 'running' AND j.locked_by = p_worker;
  RETURN QUERY SELECT v_alive,
    (SELECT coalesce(array_agg(j.id), '{}') FROM :SCHEMA.jobs j
      WHERE j.id = ANY (v_held) AND j.cancel_requested),
    (SELECT coalesce(array_agg(x), '{}') FROM unnest(p_jobs) x WHERE x <> ALL (v_held));
END $$;

-- Returns to the queue (or to `dead`, when out of attempts) the running jobs whose
-- worker died or whose lease ran out, then forgets dead workers. The attempt counts.
-- A worker is dead when its lock is gone. After a server restart every lock is gone:
-- workers last seen before the start get p_grace_ms to reconnect (re-registering takes
-- the lock again); lease expiry still applies meanwhile.
CREATE FUNCTION :SCHEMA.reap(p_grace_ms integer DEFAULT 10000)
RETURNS TABLE (released integer, dead integer, workers integer) LANGUAGE plpgsql AS $$
DECLARE
  v_live integer[];
  v_dead_workers integer[] := '{}';
  v_retry jsonb;
  v_final jsonb;
  v_released integer;
  v_dead integer;
  v_forgotten integer;
BEGIN
  v_live := :SCHEMA.live_worker_ids();
  SELECT coalesce(array_agg(w.id), '{}') INTO v_dead_workers
  FROM :SCHEMA.workers w
  WHERE w.id <> ALL (v_live)
    AND (w.heartbeat_at > pg_postmaster_start_time()
         OR clock_timestamp() - pg_postmaster_start_time() > p_grace_ms * interval '1 millisecond');

  WITH lost AS (
    SELECT j.id, j.attempts, j.attempts >= j.max_attempts AS final,
      CASE WHEN j.lease_until < now() THEN 'lease expired before the job finished'
           ELSE 'worker ' || j.locked_by || ' died while running the job' END AS why
    FROM :SCHEMA.jobs j
    WHERE j.state = 'running'
      AND (j.lease_until < now()
           OR j.locked_by = ANY (v_dead_workers)
           OR (j.locked_by IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM :SCHEMA.workers w WHERE w.id = j.locked_by)))
    FOR UPDATE OF j SKIP LOCKED
  )
  SELECT
    jsonb_agg(jsonb_build_object('id', id, 'attempt', attempts, 'error', e)) FILTER (WHERE NOT final),
    jsonb_agg(jsonb_build_object('id', id, 'attempt', attempts, 'error', e)) FILTER (WHERE final)
  INTO v_retry, v_final
  FROM (SELECT l.*, jsonb_build_object('attempt', l.attempts, 'message', l.why,
          'name', 'LostJobError', 'at', now()) AS e FROM lost l) x;

  SELECT count(*) INTO v_released FROM :SCHEMA.requeue_jobs(coalesce(v_retry, '[]'));
  SELECT count(*) INTO v_dead FROM :SCHEMA.finish_jobs('dead', coalesce(v_final, '[]'));

  DELETE FROM :SCHEMA.workers w
  WHERE w.id = ANY (v_dead_workers)
    AND NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs j WHERE j.state = 'running' AND j.locked_by = w.id);
  GET DIAGNOSTICS v_forgotten = ROW_COUNT;
  RETURN QUERY SELECT v_released, v_dead, v_forgotten;
END $$;

-- Cancels a job. Waiting jobs end `cancelled` at once; a running job is asked to stop
-- (its worker aborts ctx.signal) and ends `cancelled` if its handler then fails.
-- Returns the job's state after the call, NULL for an unknown id.
CREATE FUNCTION :SCHEMA.cancel_job(p_id bigint)
RETURNS :SCHEMA.job_state LANGUAGE plpgsql AS $$
DECLARE
  v_state :SCHEMA.job_state;
BEGIN
  PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', jsonb_build_array(jsonb_build_object('id', p_id)));
  IF FOUND THEN
    RETURN 'cancelled';
  END IF;
  UPDATE :SCHEMA.jobs SET cancel_requested = true WHERE id = p_id AND state = 'running'
  RETURNING state INTO v_state;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':cancel', p_id::text);
    RETURN v_state;
  END IF;
  SELECT h.state INTO v_state FROM :SCHEMA.job_history h WHERE h.id = p_id LIMIT 1;
  RETURN v_state;
END $$;

-- Periodic upkeep, run by one worker at a time (the others skip it): reap, promote,
-- expire, and keep history partitions ahead. Returns what it did, NULL if skipped.
CREATE FUNCTION :SCHEMA.maintain(p_grace_ms integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_promoted integer;
  v_expired integer;
  v_partitions integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL), 0) THEN
    RETURN NULL;
  END IF;
  SELECT * INTO r FROM :SCHEMA.reap(p_grace_ms);
  v_promoted := :SCHEMA.promote_due_jobs();
  v_expired := :SCHEMA.expire_jobs();
  v_partitions := :SCHEMA.ensure_history_partitions();
  RETURN jsonb_build_object('released', r.released, 'dead', r.dead, 'workers', r.workers,
    'promoted', v_promoted, 'expired', v_expired, 'partitions', v_partitions);
END $$;
