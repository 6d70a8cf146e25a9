-- Fencing that no retry, stall or lost commit can fool; durations that cannot overflow;
-- cancels that stick; dedup without deadlocks; upkeep that one bad step cannot stop.
--
-- A lease is (job id, token). The token is drawn from a sequence at every claim: never
-- handed out twice, not after retry() (which resets the attempt count), not after a claim
-- whose transaction rolled back (a sequence does not roll back). ack, nack, extension,
-- the worker's batched outcomes and its heartbeat all check it.
CREATE SEQUENCE :SCHEMA.lease_tokens;
ALTER TABLE :SCHEMA.jobs ADD COLUMN lease_token bigint;
-- leases of an install being upgraded: a fresh token each, so an old client's
-- (id, attempt) is refused and the job comes back when its lease runs out
UPDATE :SCHEMA.jobs SET lease_token = nextval(':SCHEMA.lease_tokens') WHERE state = 'running';
-- a retried job keeps its own retry policy
ALTER TABLE :SCHEMA.job_history ADD COLUMN retry jsonb;

-- Milliseconds as integer, capped: a job that waited, or ran, more than 24.8 days keeps
-- 2147483647 rather than failing its batch (and, through the reaper, every upkeep).
CREATE FUNCTION :SCHEMA.capped_ms(p_from timestamptz, p_to timestamptz, p_plus bigint DEFAULT 0)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT least(2147483647, greatest(0, extract(epoch FROM p_to - p_from) * 1000 + coalesce(p_plus, 0)))::integer
$$;

-- As in 000007, and each claim draws a fresh lease token.
CREATE OR REPLACE FUNCTION :SCHEMA.claim_jobs(
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
  v_now timestamptz;
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- A worker's claim (its own transaction) need not wait for its WAL to reach disk: lost
  -- in a crash, the jobs are simply available again (a completion of the lost claim is
  -- fenced out: its token is never handed out again). Enqueues and completions keep
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

  -- 1a. Limited tenants that look eligible (not paused, a slot free and starts left in
  --     the rate window by this snapshot): lock their rows, least recently served first.
  --     Full tenants are filtered out before the LIMIT, so they cannot crowd out tenants
  --     with room, and are not locked, so they hold back no other claim.
  SELECT coalesce(array_agg(e.tenant), '{}') INTO v_exclusive FROM (
    SELECT t.tenant FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND (t.per_key IS NOT NULL OR coalesce(t.slots, v_default) IS NOT NULL OR t.rate_limit IS NOT NULL)
      AND :SCHEMA.rate_left(t, clock_timestamp()) > 0
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
      AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
    ORDER BY t.last_served_at, t.tenant
    LIMIT least(p_max_tenants, p_limit)
  ) u
  WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
    AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
  IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

  -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
  --    exactly, and the starts left in their rate window (at v_now, read after the locks:
  --    claims of a tenant are serialized by its lock, so their v_now only grows and each
  --    start is counted in the window it falls in), re-check that the shared ones are
  --    still unlimited, and choose the jobs in round-robin order.
  v_now := clock_timestamp();
  SELECT coalesce(array_agg(c.id ORDER BY c.rn, c.last_served_at, c.tenant), '{}'), array_agg(c.tid)
  INTO v_ids, v_tids FROM (
    -- MATERIALIZED: computed once, not once per picked row
    WITH elig AS MATERIALIZED (
      SELECT t.tenant, t.last_served_at, t.per_key, t.tenant = ANY (v_shared) AS shared,
             least(:SCHEMA.rate_left(t, v_now),
               CASE WHEN lim.n IS NULL THEN p_limit
                    ELSE least(p_limit, lim.n - (
                      SELECT count(*)::integer FROM :SCHEMA.jobs r
                      WHERE r.state = 'running' AND r.tenant = t.tenant)) END) AS free
      FROM :SCHEMA.tenants t
      CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
      WHERE t.tenant = ANY (v_exclusive)
         OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
             AND NOT t.paused)
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
  --    an unlimited tenant is updated only if no parallel claim is updating it already;
  --    a rate-limited tenant's row is locked by this claim, so its starts are always
  --    counted.
  RETURN QUERY
  WITH claimed AS (
    UPDATE :SCHEMA.jobs j
    SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
        lease_token = nextval(':SCHEMA.lease_tokens'),
        started_at = v_now, lease_until = now() + p_lease_ms * interval '1 millisecond'
    WHERE j.ctid = ANY (v_tids) AND j.state = 'available'
    RETURNING j.*
  ),
  served AS (
    UPDATE :SCHEMA.tenants t SET last_served_at = clock_timestamp(),
      rate_window = CASE WHEN t.rate_limit IS NULL THEN t.rate_window
                         ELSE :SCHEMA.rate_window(t.rate_per_ms, v_now) END,
      rate_used = CASE WHEN t.rate_limit IS NULL THEN t.rate_used
                       ELSE n.n + t.rate_limit - :SCHEMA.rate_left(t, v_now) END
    FROM (SELECT c.tenant, count(*)::integer AS n FROM claimed c GROUP BY c.tenant) n
    WHERE t.tenant = n.tenant AND t.tenant IN (
      SELECT s.tenant FROM :SCHEMA.tenants s
      WHERE s.tenant IN (SELECT c.tenant FROM claimed c)
      FOR NO KEY UPDATE SKIP LOCKED)
  )
  SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
  ORDER BY o.ord;
END $$;

-- Moves jobs to history in final state p_state, in one statement.
-- p_jobs: [{id, token?, result?, stats?, error?, run_ms?, queued_ms?}]
-- A running job is finished only with its lease token: a worker whose lease ran out
-- and whose job was claimed again cannot finish it. A job given without a token is
-- finished only if it is not running. A job whose cancel was asked for and that fails
-- ends `cancelled`, not `dead`. Returns the ids that were finished.
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
      id bigint, token bigint, result jsonb, stats jsonb, error jsonb,
      run_ms bigint, queued_ms bigint)
  ),
  done AS (
    DELETE FROM :SCHEMA.jobs j USING input i
    WHERE j.id = i.id
      AND CASE WHEN i.token IS NULL THEN j.state <> 'running'
               ELSE j.state = 'running' AND j.lease_token = i.token END
    RETURNING j.*, i.result AS new_result, i.stats AS new_stats, i.error AS new_error,
              i.run_ms AS new_run_ms, coalesce(i.queued_ms, 0) AS new_queued_ms
  ),
  history AS (
    INSERT INTO :SCHEMA.job_history (
      id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
      concurrency_key, dedup_key, created_at, run_at, started_at, finished_at, expires_at,
      wait_ms, run_ms, result, errors, stats, source_type, source_id, source_method, retry)
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
      d.source_type, d.source_id, d.source_method, d.retry
    FROM done d
  )
  SELECT d.id FROM done d;
END $$;

-- Puts running jobs back in the queue: after a failed attempt (error, delay_ms), on
-- graceful stop (refund: the attempt is not counted, the job never started), or when a
-- lease is given back or lost. Fenced by token like finish_jobs. A job whose cancel was
-- asked for is not put back: it ends `cancelled` (the cancel sticks).
-- p_jobs: [{id, token, delay_ms?, error?, queue?, stats?, refund?}]
CREATE OR REPLACE FUNCTION :SCHEMA.requeue_jobs(p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_cancelled jsonb;
  v_moved boolean;
BEGIN
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, token bigint, delay_ms bigint, error jsonb, queue text, stats jsonb,
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
      lease_token = NULL,
      queue = coalesce(i.queue, j.queue),
      errors = :SCHEMA.append_error(j.errors, i.error),
      stats = CASE WHEN i.stats IS NULL THEN j.stats ELSE coalesce(j.stats, '{}') || i.stats END
    FROM input i
    -- checked again on the row's newest version if a cancel commits meanwhile
    WHERE j.id = i.id AND j.state = 'running' AND j.lease_token = i.token AND NOT j.cancel_requested
    RETURNING j.id
  )
  SELECT m.id FROM moved m;
  v_moved := FOUND;
  -- the rest, whose cancel was asked for: a statement of its own sees a cancel that
  -- committed while the update above waited for the row
  SELECT jsonb_agg(e.value) INTO v_cancelled
  FROM jsonb_array_elements(p_jobs) e
  JOIN :SCHEMA.jobs j ON j.id = (e.value->>'id')::bigint
  WHERE j.cancel_requested AND j.state = 'running' AND j.lease_token = (e.value->>'token')::bigint;
  IF v_cancelled IS NOT NULL THEN
    RETURN QUERY SELECT f.id FROM :SCHEMA.finish_jobs('cancelled', v_cancelled) f;
  END IF;
  IF v_moved THEN
    -- wakes idle workers: to claim what is available, or to time the next retry
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- The lease API for consumers in any language, with (id, token) leases:
--   SELECT id, lease_token, task, payload FROM tusk.fetch_jobs(10, 30000);  -- lease up to 10 jobs for 30 s
--   SELECT tusk.extend_lease(42, 7, 60000);              -- WORKING: keep it 60 s more
--   SELECT tusk.ack_job(42, 7, '{"ok": true}');          -- ACK (7: the lease_token fetched)
--   SELECT tusk.nack_job(42, 7, 5000, '{"message": "upstream down"}');   -- NACK, retry in 5 s
DROP FUNCTION :SCHEMA.ack_job(bigint, integer, jsonb);
DROP FUNCTION :SCHEMA.nack_job(bigint, integer, integer, jsonb);
DROP FUNCTION :SCHEMA.extend_lease(bigint, integer, integer);

-- Completes a leased job. False if the lease is not held any more (it ran out and the job
-- was leased again, or it was already acked): a lease is acked at most once.
CREATE FUNCTION :SCHEMA.ack_job(p_id bigint, p_token bigint, p_result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE sql AS $$
  SELECT EXISTS (SELECT 1 FROM :SCHEMA.finish_jobs('succeeded',
    jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'result', p_result))))
$$;

-- Gives a leased job back after a failed attempt: it is retried after p_delay_ms, or ends
-- `dead` if it has no attempts left (`cancelled` if its cancel was asked for). Returns
-- the job's state after the call, NULL if the lease is not held any more.
CREATE FUNCTION :SCHEMA.nack_job(
  p_id bigint, p_token bigint, p_delay_ms integer DEFAULT 0, p_error jsonb DEFAULT NULL
) RETURNS :SCHEMA.job_state LANGUAGE plpgsql AS $$
DECLARE
  v_job :SCHEMA.jobs;
  v_error jsonb;
BEGIN
  SELECT * INTO v_job FROM :SCHEMA.jobs
  WHERE id = p_id AND lease_token = p_token AND state = 'running' FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  v_error := jsonb_build_object('attempt', v_job.attempts, 'at', now(), 'name', 'Nack',
    'message', 'given back by its consumer') || coalesce(p_error, '{}');
  IF v_job.cancel_requested OR v_job.attempts >= v_job.max_attempts THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('dead',
      jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'error', v_error)));
    RETURN CASE WHEN v_job.cancel_requested THEN 'cancelled' ELSE 'dead' END;
  END IF;
  PERFORM 1 FROM :SCHEMA.requeue_jobs(jsonb_build_array(jsonb_build_object(
    'id', p_id, 'token', p_token, 'error', v_error, 'delay_ms', greatest(0, coalesce(p_delay_ms, 0)))));
  RETURN CASE WHEN coalesce(p_delay_ms, 0) > 0 THEN 'failed' ELSE 'available' END;
END $$;

-- WORKING: the lease of a leased job now ends p_ms from now. Returns the new end, NULL
-- if the lease is not held any more.
CREATE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE sql AS $$
  UPDATE :SCHEMA.jobs SET lease_until = now() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until
$$;

-- Worker heartbeat: marks the worker alive, extends the leases it holds (when past half
-- their length), and reports which were cancelled or lost, by token. lease_left_ms: how
-- long the shortest lease still held runs, from the server's now() (which is after the
-- worker sent the call: counted from the send, it is a safe local deadline).
DROP FUNCTION :SCHEMA.heartbeat(integer, bigint[], integer);
CREATE FUNCTION :SCHEMA.heartbeat(p_worker integer, p_ids bigint[], p_tokens bigint[], p_lease_ms integer)
RETURNS TABLE (alive boolean, cancelled bigint[], lost bigint[], lease_left_ms integer) LANGUAGE plpgsql AS $$
DECLARE
  v_alive boolean;
BEGIN
  UPDATE :SCHEMA.workers SET heartbeat_at = now() WHERE id = p_worker;
  v_alive := FOUND;
  UPDATE :SCHEMA.jobs j SET lease_until = now() + p_lease_ms * interval '1 millisecond'
  FROM unnest(p_ids, p_tokens) AS x(id, token)
  WHERE j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
    AND j.lease_until < now() + p_lease_ms * interval '0.5 millisecond';
  RETURN QUERY
  WITH held AS (
    SELECT j.lease_token, j.cancel_requested, j.lease_until
    FROM unnest(p_ids, p_tokens) AS x(id, token)
    JOIN :SCHEMA.jobs j ON j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
  )
  SELECT v_alive,
    (SELECT coalesce(array_agg(h.lease_token), '{}') FROM held h WHERE h.cancel_requested),
    (SELECT coalesce(array_agg(x), '{}') FROM unnest(p_tokens) x
      WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.lease_token = x)),
    (SELECT :SCHEMA.capped_ms(now(), min(h.lease_until)) FROM held h);
END $$;

-- Returns to the queue (or to `dead`, when out of attempts) the running jobs whose
-- worker died or whose lease ran out, then forgets dead workers. The attempt counts.
-- A worker is dead when its lock is gone. After a server restart every lock is gone:
-- workers last seen before the start get p_grace_ms to reconnect (re-registering takes
-- the lock again); lease expiry still applies meanwhile.
CREATE OR REPLACE FUNCTION :SCHEMA.reap(p_grace_ms integer DEFAULT 10000)
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
    SELECT j.id, j.attempts, j.lease_token, j.attempts >= j.max_attempts AS final,
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
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE NOT final),
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE final)
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
-- (its worker aborts ctx.signal) and ends `cancelled` if it fails, is given back or its
-- lease is lost. The job's row is locked first, so a nack or requeue committing meanwhile
-- is waited for and its outcome seen: a live job is never answered "unknown".
-- Returns the job's state after the call, NULL for an unknown id.
CREATE OR REPLACE FUNCTION :SCHEMA.cancel_job(p_id bigint)
RETURNS :SCHEMA.job_state LANGUAGE plpgsql AS $$
DECLARE
  v_state :SCHEMA.job_state;
BEGIN
  SELECT j.state INTO v_state FROM :SCHEMA.jobs j WHERE j.id = p_id FOR UPDATE;
  IF FOUND AND v_state = 'running' THEN
    UPDATE :SCHEMA.jobs SET cancel_requested = true WHERE id = p_id;
    PERFORM pg_notify(:SCHEMA_LITERAL || ':cancel', p_id::text);
    RETURN v_state;
  ELSIF FOUND THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', jsonb_build_array(jsonb_build_object('id', p_id)));
    RETURN 'cancelled';
  END IF;
  -- finished (or finished by a transaction that committed while this one waited)
  SELECT h.state INTO v_state FROM :SCHEMA.job_history h WHERE h.id = p_id LIMIT 1;
  RETURN v_state;
END $$;

-- Re-queues finished jobs (dead, cancelled, expired) and failed jobs waiting for a retry:
-- available now, attempts reset, errors kept, and their own retry policy and dedup key
-- kept (the key unless another unfinished job of the tenant holds it now). A retried
-- job's next claim gets a new token: leases from before are refused.
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
                              source_type, source_id, source_method, retry, dedup_key)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry,
           CASE WHEN NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs o
                                 WHERE o.tenant = r.tenant AND o.dedup_key = r.dedup_key)
                THEN r.dedup_key END
    FROM revived r
    RETURNING jobs.id
  )
  SELECT w.id FROM waiting w UNION ALL SELECT b.id FROM back b;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- How long until the next scheduled job or retry is due, or a rate window reopens, in
-- milliseconds by the database's clock (0: now; NULL: nothing pending). Workers wait
-- this long: a worker's own clock may be ahead or behind.
CREATE FUNCTION :SCHEMA.next_due_in_ms()
RETURNS bigint LANGUAGE sql STABLE AS $$
  -- greatest() skips NULLs: nothing pending must stay NULL, not become "due now"
  SELECT CASE WHEN d.at IS NULL THEN NULL
              ELSE greatest(0, ceil(extract(epoch FROM d.at - clock_timestamp()) * 1000))::bigint END
  FROM (SELECT :SCHEMA.next_due_at() AS at) d
$$;

-- Periodic upkeep, run by one process at a time (the others skip it): reap, promote,
-- expire, and keep history partitions ahead. Each step runs on its own: one that fails
-- (a row no statement can take, a lock timeout) is rolled back and reported in `errors`,
-- and the others still run. Returns what it did, NULL if skipped.
CREATE OR REPLACE FUNCTION :SCHEMA.maintain(p_grace_ms integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_done jsonb := '{}';
  v_errors jsonb := '[]';
  r record;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL), 0) THEN
    RETURN NULL;
  END IF;
  BEGIN
    SELECT * INTO r FROM :SCHEMA.reap(p_grace_ms);
    v_done := v_done || jsonb_build_object('released', r.released, 'dead', r.dead, 'workers', r.workers);
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'reap', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('promoted', :SCHEMA.promote_due_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'promote', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('expired', :SCHEMA.expire_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'expire', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('partitions', :SCHEMA.ensure_history_partitions());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'partitions', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  RETURN v_done || jsonb_build_object('errors', v_errors);
END $$;

-- As in 000005, with the dedup keys locked in one order before any insert.
CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql AS $$
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
    SELECT DISTINCT hashtext(coalesce(x.tenant, 'default') || E'\x1f' || x.dedup_key) AS h
    FROM jsonb_to_recordset(p_jobs) AS x(tenant text, dedup_key text)
    WHERE x.dedup_key IS NOT NULL
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
