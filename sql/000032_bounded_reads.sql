-- Reads of the hot path that grew with what they did not need.
--
-- 1. The arrivals a claim reads (jobs made available by a transaction its lane's mark did
--    not see) are bounded by the mark's position: only an arrival at or before the mark
--    can be missed by the lane's read from the mark on. The index of arrivals gains the
--    position, (avail_xid, priority, id), so that the bound is checked on the index entry
--    and the arrivals after the mark cost no heap visit. The new marks' check reads the
--    arrivals once for all the lanes of a claim, not once per lane.
--
--    Why: the arrivals since a mark are the jobs enqueued since that lane was last
--    claimed. With a backlog, a claim that took a few seconds left marks a few seconds
--    old; the next claim read every job enqueued since (45 000 rows, five times: once for
--    the claim, once per lane for the new marks) and took longer still. In the pressure
--    run's pinned phase this fed on itself: claims of 5 to 24 s, the new marks' check
--    8 to 17 s of them, started jobs near zero for 85 s and a backlog of 900 000.
--
-- 2. Heartbeats, completions, retries, progress and promotions find their jobs by id
--    (`id = ANY`), an index condition whatever the estimates. Planned per call, a join of
--    the input to `jobs` was planned with `jobs` outside when the statistics said few jobs
--    run (ANALYZE after a quiet spell): a whole scan of jobs_pkey per call, 640 000
--    buffers and 1 s for a heartbeat holding no job, 2 s for a completion, while the
--    horizon was pinned.
--    `state IS NOT DISTINCT FROM 'running'` (the same test: state is never null) keeps
--    the partial index of running jobs out of those plans: with the same statistics it
--    was read whole, every running job, to find one by id.
--
-- 3. The upkeep's search for lost jobs is paced by its own cost, and a worker whose lock
--    is gone but that beat within the last second is given that second to register again
--    (below).

DROP INDEX :SCHEMA.jobs_arrivals;
CREATE INDEX jobs_arrivals ON :SCHEMA.jobs (avail_xid, priority, id)
  WHERE state IS NOT DISTINCT FROM 'available' AND avail_xid IS NOT NULL;


-- The heartbeat: the leases it renews and reads, found by id.
CREATE OR REPLACE FUNCTION :SCHEMA.heartbeat(p_worker integer, p_ids bigint[], p_tokens bigint[], p_lease_ms integer)
RETURNS TABLE (alive boolean, cancelled bigint[], lost bigint[], lease_left_ms integer) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_alive boolean;
BEGIN
  UPDATE :SCHEMA.workers SET heartbeat_at = now() WHERE id = p_worker;
  v_alive := FOUND;
  UPDATE :SCHEMA.jobs j SET lease_until = now() + p_lease_ms * interval '1 millisecond'
  FROM unnest(p_ids, p_tokens) AS x(id, token)
  WHERE j.id = ANY (p_ids) AND j.id = x.id AND j.lease_token = x.token
    AND j.state IS NOT DISTINCT FROM 'running'
    AND j.lease_until < now() + p_lease_ms * interval '0.5 millisecond';
  RETURN QUERY
  WITH held AS (
    SELECT j.lease_token, j.cancel_requested, j.lease_until
    FROM unnest(p_ids, p_tokens) AS x(id, token)
    JOIN :SCHEMA.jobs j ON j.id = x.id AND j.lease_token = x.token
    WHERE j.id = ANY (p_ids) AND j.state IS NOT DISTINCT FROM 'running'
  )
  SELECT v_alive,
    (SELECT coalesce(array_agg(h.lease_token), '{}') FROM held h WHERE h.cancel_requested),
    (SELECT coalesce(array_agg(x), '{}') FROM unnest(p_tokens) x
      WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.lease_token = x)),
    (SELECT :SCHEMA.capped_ms(now(), min(h.lease_until)) FROM held h);
END $$;

-- Progress: the same.
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
  FROM unnest(v_set) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 900;
  RETURN cardinality(v_set);
END $$;

-- Completions: the jobs found by id.
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
  -- for waitFor(): the finished ids, at most 900 a notification (a payload holds 8000 bytes)
  PERFORM pg_notify(:SCHEMA_LITERAL || ':done', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_ids) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 900;
  RETURN v_ids;
END $$;

-- Retries and releases: the same.
CREATE OR REPLACE FUNCTION :SCHEMA.requeue_jobs(p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_custom_plan
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
    WHERE j.id = ANY (ARRAY(SELECT i.id FROM input i)) AND j.id = i.id
      AND j.state IS NOT DISTINCT FROM 'running' AND j.lease_token = i.token AND NOT j.cancel_requested
    RETURNING j.id
  )
  SELECT m.id FROM moved m;
  v_moved := FOUND;
  -- the rest, whose cancel was asked for: a statement of its own sees a cancel that
  -- committed while the update above waited for the row
  SELECT jsonb_agg(e.value) INTO v_cancelled
  FROM jsonb_array_elements(p_jobs) e
  JOIN :SCHEMA.jobs j ON j.id = (e.value->>'id')::bigint
  WHERE j.id = ANY (ARRAY(SELECT (v.value->>'id')::bigint FROM jsonb_array_elements(p_jobs) v))
    AND j.cancel_requested AND j.state IS NOT DISTINCT FROM 'running' AND j.lease_token = (e.value->>'token')::bigint;
  IF v_cancelled IS NOT NULL THEN
    RETURN QUERY SELECT f.id FROM :SCHEMA.finish_jobs('cancelled', v_cancelled) f;
  END IF;
  IF v_moved THEN
    -- wakes idle workers: to claim what is available, or to time the next retry
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- Promotions of due jobs: the same.
CREATE OR REPLACE FUNCTION :SCHEMA.promote_due_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  v_now timestamptz := clock_timestamp();
BEGIN
  WITH due AS (
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state IN ('scheduled', 'failed') AND j.waiting_on = 0 AND j.run_at <= v_now
    ORDER BY j.run_at LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  )
  UPDATE :SCHEMA.jobs j SET state = 'available' WHERE j.id = ANY (ARRAY(SELECT due.id FROM due));
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
  RETURN n;
END $$;

-- The jobs made available by a transaction a snapshot did not see, at or before a
-- position in (priority, id) order. Readers holding several marks pass the furthest and
-- filter per mark. The bound is an index condition on jobs_arrivals: the entries after it
-- are passed over in the index, with no heap visit. `state IS NOT DISTINCT FROM
-- 'available'` (the same test: state is never null) is the predicate of jobs_arrivals
-- and of no other index, so these reads use jobs_arrivals whatever the estimates: with
-- `state = 'available'`, a generic plan read the in-progress xids' range as a scan of
-- jobs_ready, every available job (33 000, 600 ms a claim). No parallel plan: launching
-- workers to read a few rows cost 400 ms a claim when the estimates grew
-- (IPC:ExecuteGather was most of what claims waited on in a pinned phase).
CREATE FUNCTION :SCHEMA.arrivals_before(p_xmax xid8, p_xip xid8[], p_priority smallint, p_id bigint)
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
AS $$
  -- two ranges, not an OR: each is an index condition whatever the estimates
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state IS NOT DISTINCT FROM 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid >= p_xmax
    AND (j.priority, j.id) <= (p_priority, p_id)
  UNION ALL
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state IS NOT DISTINCT FROM 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid = ANY (p_xip)
    AND (p_xmax IS NULL OR j.avail_xid < p_xmax) AND (j.priority, j.id) <= (p_priority, p_id)
$$;

-- All of them, wherever they sit (the look for new pairs needs every arrival's pair).
CREATE OR REPLACE FUNCTION :SCHEMA.arrivals_since(p_xmax xid8, p_xip xid8[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE sql STABLE
AS $$
  SELECT * FROM :SCHEMA.arrivals_before(p_xmax, p_xip, 32767::smallint, 9223372036854775807)
$$;

-- The arrivals that lane marks did not see, each at or before its own lane's mark: what
-- reading each lane from its mark on would miss. Marks as parallel arrays (queue, tenant,
-- position, snapshot); a lane with no mark (no snapshot) has none. One bounded read for
-- them all, from the oldest mark's xmax up to the furthest position, then each arrival
-- kept if its own lane's mark did not see it (PgQ's rule: xid at or past the snapshot's
-- xmax, or among its in-progress xids) and it sits at or before that mark.
CREATE FUNCTION :SCHEMA.arrivals_behind(p_queues text[], p_tenants text[], p_priorities smallint[],
                                        p_ids bigint[], p_snaps pg_snapshot[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, expires_at timestamptz)
LANGUAGE sql STABLE
AS $$
  WITH m AS MATERIALIZED (
    SELECT q.queue, q.tenant, q.priority, q.id, pg_snapshot_xmax(q.snap) AS xmax,
           ARRAY(SELECT pg_snapshot_xip(q.snap)) AS xip
    FROM unnest(p_queues, p_tenants, p_priorities, p_ids, p_snaps) AS q(queue, tenant, priority, id, snap)
  )
  SELECT a.id, a.tid, a.queue, a.tenant, a.priority, a.expires_at
  FROM (SELECT m.priority, m.id FROM m ORDER BY m.priority DESC, m.id DESC LIMIT 1) b
  CROSS JOIN LATERAL :SCHEMA.arrivals_before(
    (SELECT min(m.xmax) FROM m), ARRAY(SELECT DISTINCT x FROM m, unnest(m.xip) x), b.priority, b.id) a
  WHERE EXISTS (SELECT 1 FROM m
                WHERE m.queue = a.queue AND m.tenant = a.tenant
                  AND (a.avail_xid >= m.xmax OR a.avail_xid = ANY (m.xip))
                  AND (a.priority, a.id) <= (m.priority, m.id))
$$;


-- The upkeep's search for lost jobs reads every running job (jobs_running). While a
-- horizon is pinned that index keeps an entry for every job that ran since, and the
-- search grew with them: 1.7 s a pass (two scans of 100 000 buffers) after two minutes
-- of a pin at 10 000 jobs/s, 85 % of a core in a 500 ms upkeep. It now runs once, and
-- when it took over 100 ms, the next runs after 10 times as long (at most a minute; at
-- most a tenth of the upkeep's time), unless a worker's lock is gone: those workers'
-- jobs are always looked for at once. Without bloat (a search of a few ms) nothing
-- changes: every pass searches. The pace is kept in the upkeep's own row (lane_prune),
-- which every role that runs the upkeep may already write.
--
-- A worker's lock lives on its listening connection. When that connection is cut (a
-- pg_terminate_backend storm, a proxy restart) the worker reconnects and registers again
-- within milliseconds, but an upkeep pass in between took it for dead: every job it held
-- (thousands, with prefetch) went back to the queue, an attempt counted, and its results
-- were fenced out; at 12 000 jobs/s a storm of 4 cuts a second took the workers to
-- 1 900 jobs/s and a backlog of 1.4 million. A worker whose lock is gone is now dead once
-- it has not beaten for a second (it beats every second by default, and not
-- while its listening connection is down): a crashed worker's jobs go back at most a
-- second later than before.
ALTER TABLE :SCHEMA.lane_prune
  ADD COLUMN reap_searched_at timestamptz,
  ADD COLUMN reap_search_ms double precision NOT NULL DEFAULT 0;

-- The lost jobs' rows, found by id.
CREATE OR REPLACE FUNCTION :SCHEMA.requeue_lost(p_ids bigint[], p_dead_workers integer[] DEFAULT '{}')
RETURNS TABLE (released integer, dead integer) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_retry jsonb;
  v_final jsonb;
BEGIN
  WITH lost AS (
    SELECT j.id, j.attempts, j.lease_token, j.attempts >= j.max_attempts AS final,
      CASE WHEN j.lease_until < now() THEN 'lease expired before the job finished'
           ELSE 'worker ' || j.locked_by || ' died while running the job' END AS why
    FROM :SCHEMA.jobs j
    WHERE j.id = ANY (p_ids) AND j.state IS NOT DISTINCT FROM 'running'
      AND (j.lease_until < now()
           OR j.locked_by = ANY (p_dead_workers)
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
  -- only when there is something to do: finishing touches job_history, which a fetch
  -- with no expired lease in sight must not wait for
  RETURN QUERY SELECT
    CASE WHEN v_retry IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.requeue_jobs(v_retry)) END,
    CASE WHEN v_final IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.finish_jobs('dead', v_final)) END;
END $$;

-- The search, paced by its own cost.
CREATE OR REPLACE FUNCTION :SCHEMA.reap(p_grace_ms integer DEFAULT 10000)
RETURNS TABLE (released integer, dead integer, workers integer) LANGUAGE plpgsql AS $$
DECLARE
  v_live integer[];
  v_dead_workers integer[] := '{}';
  r record;
  v_forgotten integer;
  v_pace :SCHEMA.lane_prune;
  v_start timestamptz;
  v_lost bigint[];
BEGIN
  v_live := :SCHEMA.live_worker_ids();
  SELECT coalesce(array_agg(w.id), '{}') INTO v_dead_workers
  FROM :SCHEMA.workers w
  WHERE w.id <> ALL (v_live)
    -- a worker whose lock went with its listening connection but that beat in the last
    -- second is reconnecting: given that second to register again before its jobs go
    AND w.heartbeat_at < clock_timestamp() - interval '1 second'
    AND (w.heartbeat_at > pg_postmaster_start_time()
         OR clock_timestamp() - pg_postmaster_start_time() > p_grace_ms * interval '1 millisecond');
  SELECT * INTO v_pace FROM :SCHEMA.lane_prune;
  -- due: a worker's lock is gone, no slow search yet, or the wait after one is over (a
  -- clock gone back counts as over; a search that waited for a lock waits a minute at most)
  IF cardinality(v_dead_workers) > 0 OR v_pace.reap_searched_at IS NULL OR v_pace.reap_search_ms < 100
     OR clock_timestamp() < v_pace.reap_searched_at
     OR clock_timestamp() >= v_pace.reap_searched_at
                             + least(10 * v_pace.reap_search_ms, 60000) * interval '1 millisecond' THEN
    v_start := clock_timestamp();
    -- one scan: the candidates' rows are then read by id
    v_lost := ARRAY(
      SELECT j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'running'
        AND (j.lease_until < now()
             OR j.locked_by = ANY (v_dead_workers)
             OR (j.locked_by IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM :SCHEMA.workers w WHERE w.id = j.locked_by))));
    UPDATE :SCHEMA.lane_prune
    SET reap_searched_at = v_start, reap_search_ms = extract(epoch FROM clock_timestamp() - v_start) * 1000;
    SELECT * INTO r FROM :SCHEMA.requeue_lost(v_lost, v_dead_workers);
  ELSE
    SELECT 0 AS released, 0 AS dead INTO r;
  END IF;

  DELETE FROM :SCHEMA.workers w
  WHERE w.id = ANY (v_dead_workers)
    AND NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs j WHERE j.state = 'running' AND j.locked_by = w.id);
  GET DIAGNOSTICS v_forgotten = ROW_COUNT;
  RETURN QUERY SELECT r.released, r.dead, v_forgotten;
END $$;

-- A pair has work when a job sits after its mark, or arrived at or before it: an arrival
-- after the mark is a job after the mark, so only those at or before it are read.
CREATE OR REPLACE FUNCTION :SCHEMA.pairs_with_work(p_pairs :SCHEMA.lane[]) RETURNS :SCHEMA.lane[]
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
  WITH pairs AS MATERIALIZED (
    SELECT p.queue, p.tenant, m.priority, m.id, m.snap
    FROM unnest(p_pairs) p CROSS JOIN LATERAL :SCHEMA.lane_mark(p.queue, p.tenant) m
  ),
  arr AS MATERIALIZED (
    SELECT a.queue, a.tenant FROM :SCHEMA.arrivals_behind(
      ARRAY(SELECT p.queue FROM pairs p), ARRAY(SELECT p.tenant FROM pairs p),
      ARRAY(SELECT p.priority FROM pairs p), ARRAY(SELECT p.id FROM pairs p),
      ARRAY(SELECT p.snap FROM pairs p)) a
  )
  SELECT array_agg(ROW(p.queue, p.tenant, NULL):::SCHEMA.lane) FROM pairs p
  WHERE EXISTS (SELECT 1 FROM :SCHEMA.jobs j
                WHERE j.state = 'available' AND j.queue = p.queue AND j.tenant = p.tenant
                  AND (j.priority, j.id) > (p.priority, p.id))
     OR EXISTS (SELECT 1 FROM arr a WHERE a.queue = p.queue AND a.tenant = p.tenant)
$$;

-- The upkeep's renewal of marks: the same bounded read.
CREATE OR REPLACE FUNCTION :SCHEMA.prune_lanes() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
  w :SCHEMA.lane_prune;
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
  -- A fresh snapshot after the lock: an arrival it misses is one the next look sees.
  -- Pairs with no work and no claim for a minute out.
  WITH idle AS MATERIALIZED (
    SELECT a.queue, a.tenant FROM :SCHEMA.active_pairs a
    WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.lane_marks m
                      WHERE m.queue = a.queue AND m.tenant = a.tenant AND m.claimed
                        AND m.at > now() - interval '1 minute')
  ),
  busy AS (
    SELECT b.queue, b.tenant FROM unnest(:SCHEMA.pairs_with_work(
      ARRAY(SELECT ROW(i.queue, i.tenant, NULL):::SCHEMA.lane FROM idle i))) b
  )
  DELETE FROM :SCHEMA.active_pairs a USING idle i
  WHERE a.queue = i.queue AND a.tenant = i.tenant
    AND NOT EXISTS (SELECT 1 FROM busy b WHERE b.queue = a.queue AND b.tenant = a.tenant);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  -- Marks kept fresh: a reader's scan of arrivals starts at the oldest mark it holds, so
  -- a lane not claimed for a while (full, paused, idle) would pull it back. A mark older
  -- than a second gets a successor at the same position under this snapshot when no job
  -- at or before the position arrived since: then every job available in this snapshot at
  -- or before it is gone, as the old mark said of its own.
  WITH stale AS MATERIALIZED (
    SELECT a.queue, a.tenant, m.priority, m.id, m.snap FROM :SCHEMA.active_pairs a
    CROSS JOIN LATERAL :SCHEMA.lane_mark(a.queue, a.tenant) m
    WHERE m.at < now() - interval '1 second'
  ),
  arr AS MATERIALIZED (
    SELECT a.queue, a.tenant FROM :SCHEMA.arrivals_behind(
      ARRAY(SELECT s.queue FROM stale s), ARRAY(SELECT s.tenant FROM stale s),
      ARRAY(SELECT s.priority FROM stale s), ARRAY(SELECT s.id FROM stale s),
      ARRAY(SELECT s.snap FROM stale s)) a
  )
  INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap, claimed)
  SELECT s.queue, s.tenant, s.priority, s.id, pg_current_snapshot(), false FROM stale s
  WHERE NOT EXISTS (SELECT 1 FROM arr a WHERE a.queue = s.queue AND a.tenant = s.tenant);
  -- Marks, serves and looks that have a newer one of their own are read no more. Each
  -- pass deletes them from a little before where the previous one stopped, on the seq key:
  -- a pass does not read again the rows earlier passes deleted (dead and kept while a
  -- horizon is pinned). The overlap takes up rows that were not yet committed when the
  -- previous pass ran; every 100th pass starts from the beginning.
  UPDATE :SCHEMA.lane_prune SET passes = passes + 1 RETURNING * INTO w;
  DELETE FROM :SCHEMA.lane_marks m
  WHERE m.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.marks - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.lane_marks n
                WHERE n.queue = m.queue AND n.tenant = m.tenant AND n.seq > m.seq);
  DELETE FROM :SCHEMA.tenant_serves s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.serves - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.tenant_serves n WHERE n.tenant = s.tenant AND n.seq > s.seq);
  DELETE FROM :SCHEMA.pair_scans s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.scans - 5000 END
    AND s.seq < (SELECT max(n.seq) FROM :SCHEMA.pair_scans n);
  UPDATE :SCHEMA.lane_prune SET
    marks = coalesce((SELECT max(m.seq) FROM :SCHEMA.lane_marks m), marks),
    serves = coalesce((SELECT max(s.seq) FROM :SCHEMA.tenant_serves s), serves),
    scans = coalesce((SELECT max(s.seq) FROM :SCHEMA.pair_scans s), scans);
  RETURN v_n;
END $$;

-- The claim: its arrivals read bounded by the furthest mark it holds, and the new marks'
-- check reads the arrivals once for all the lanes, not once per lane.
CREATE OR REPLACE FUNCTION :SCHEMA.claim_jobs(
  p_worker integer,
  p_limit integer,
  p_lease_ms integer,
  p_queues text[] DEFAULT NULL,
  p_tenant text DEFAULT NULL,
  p_max_tenants integer DEFAULT 64,
  p_async_commit boolean DEFAULT false
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
  v_pairs :SCHEMA.lane[];
  v_lanes :SCHEMA.lane[];
  v_candidates text[];
  v_exclusive text[];
  v_shared text[];
  v_ids bigint[];
  v_tids tid[];
  v_mark_queues text[];
  v_mark_tenants text[];
  v_mark_priorities smallint[];
  v_mark_ids bigint[];
  v_mark_snaps pg_snapshot[];
  v_queues text[];
  v_tenants text[];
  v_priorities smallint[];
  v_default integer;
  v_space integer := :SCHEMA.tenant_lock_space();
  v_now timestamptz;
  v_left integer := p_limit;
  v_share integer;
  v_full text[];
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- A worker's claim (its own transaction) need not wait for its WAL to reach disk: lost
  -- in a crash, the jobs are simply available again (a completion of the lost claim is
  -- fenced out: its token is never handed out again). Enqueues and completions keep
  -- synchronous commits; a caller's own transaction is left alone (the default).
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- (queue, tenant) pairs with work: what other tenants have waiting, however many
  -- concurrency keys, costs nothing here
  v_pairs := :SCHEMA.ready_pairs(p_queues, p_tenant);
  IF v_pairs IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT l.tenant) INTO v_candidates FROM unnest(v_pairs) l;

  -- Tenants first seen in jobs (SQL inserts, new tenants) get their row here, not at
  -- enqueue, so enqueue never takes a lock a caller's transaction would hold.
  INSERT INTO :SCHEMA.tenants (tenant)
  SELECT c.tenant FROM unnest(v_candidates) c(tenant)
  WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.tenants t WHERE t.tenant = c.tenant)
  ON CONFLICT DO NOTHING;
  SELECT default_slots INTO v_default FROM :SCHEMA.config;

  -- Rounds: each tenant chosen takes at most its share of what is left (`share`, below);
  -- another round follows, among the tenants that took their whole share (v_full), only
  -- when there are some: they may have more. Each round takes at least one job or ends.
  LOOP
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
             OR coalesce(t.slots, v_default) > :SCHEMA.running_now(t.tenant, ''))
      ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
      LIMIT least(p_max_tenants, v_left)
      FOR UPDATE OF t SKIP LOCKED
    ) e;

    -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
    SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
      SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
      WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
        AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
      ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
      LIMIT least(p_max_tenants, v_left)
    ) u
    WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
      AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
    IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

    -- The lanes of the chosen tenants: a (queue, tenant) pair read in (priority, id) order
    -- across its keys, or, for a tenant with a per-key limit, one lane per key (at most
    -- config.key_lanes of them per pair, in key order).
    SELECT array_agg(x.l) INTO v_lanes FROM (
      SELECT p AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
      WHERE t.per_key IS NULL AND (p.tenant = ANY (v_exclusive) OR p.tenant = ANY (v_shared))
      UNION ALL
      SELECT k AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
      CROSS JOIN LATERAL unnest(:SCHEMA.key_lanes(p.queue, p.tenant)) k
      WHERE t.per_key IS NOT NULL AND p.tenant = ANY (v_exclusive)
    ) x;
    IF v_lanes IS NULL THEN RETURN; END IF;

    -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
    --    exactly, and the starts left in their rate window (at v_now, read after the locks:
    --    claims of a tenant are serialized by its lock, so their v_now only grows and each
    --    start is counted in the window it falls in), re-check that the shared ones are
    --    still unlimited, and choose the jobs in round-robin order.
    v_now := clock_timestamp();
    WITH elig AS MATERIALIZED (  -- MATERIALIZED: computed once, not once per picked row
      SELECT t.tenant, :SCHEMA.served_at(t.tenant) AS last_served_at, t.per_key,
             t.tenant = ANY (v_shared) AS shared,
             least(:SCHEMA.rate_left(t, v_now),
               CASE WHEN lim.n IS NULL THEN v_left
                    ELSE least(v_left, lim.n - :SCHEMA.running_now(t.tenant, '')) END) AS free
      FROM :SCHEMA.tenants t
      CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
      WHERE t.tenant = ANY (v_exclusive)
         OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
             AND NOT t.paused)
    ),
    -- A tenant's share of the batch: the level s at which the tenants' free slots, each
    -- capped at s, add up to what is left (water-filling: tenants with fewer free slots
    -- take them all, the others s each). Round-robin by job takes no more than s from a
    -- tenant while every other one has jobs. Locking (or reading) more, up to the whole
    -- batch in every lane, was wasted: with 4 busy tenants a claim locked 4 jobs for each
    -- it took, and a parallel claim walked past those (SKIP LOCKED) and could not mark
    -- past them. A tenant with fewer jobs than its share leaves the rest to another round.
    fill AS (
      SELECT e.free, row_number() OVER w AS k, count(*) OVER () AS t,
             coalesce(sum(e.free) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS below
      FROM elig e WHERE e.free > 0
      WINDOW w AS (ORDER BY e.free, e.tenant)
    ),
    share AS MATERIALIZED (
      SELECT coalesce((SELECT ceil((v_left - f.below)::numeric / (f.t - f.k + 1))::integer FROM fill f
                       WHERE f.below + (f.t - f.k + 1) * f.free >= v_left ORDER BY f.k LIMIT 1),
                      v_left) AS n
    ),
    lanes AS MATERIALIZED (
      SELECT l.queue, l.tenant, l.concurrency_key, e.free, sh.n AS share, e.last_served_at, e.shared,
             CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                  ELSE e.per_key - :SCHEMA.running_now(l.tenant, l.concurrency_key) END AS key_free,
             m.priority AS m_priority, m.id AS m_id, m.snap AS m_snap
      FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant CROSS JOIN share sh
      CROSS JOIN LATERAL :SCHEMA.lane_mark(l.queue, l.tenant) m
      WHERE e.free > 0
    ),
    arr AS MATERIALIZED (
      SELECT a.* FROM :SCHEMA.arrivals_behind(
        ARRAY(SELECT n.queue FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.tenant FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_priority FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_id FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_snap FROM lanes n WHERE n.concurrency_key IS NULL)) a
    ),
    -- Limited tenants' pair lanes (their claims are serialized by the tenant's row lock):
    -- the first jobs in lane order, the arrivals before the mark and the jobs after it.
    cands AS MATERIALIZED (
      SELECT n.queue, n.tenant, x.id, x.tid, x.priority
      FROM lanes n CROSS JOIN LATERAL (
        SELECT y.* FROM (
          (SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
           WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
             AND (j.priority, j.id) > (n.m_priority, n.m_id)
             AND (j.expires_at IS NULL OR j.expires_at > now())
           ORDER BY j.priority, j.id
           LIMIT least(n.free, n.share))
          UNION ALL
          SELECT a.id, a.tid, a.priority FROM arr a
          WHERE a.queue = n.queue AND a.tenant = n.tenant
            AND (a.expires_at IS NULL OR a.expires_at > now())
        ) y
        ORDER BY y.priority, y.id
        LIMIT least(n.free, n.share)
      ) x
      WHERE NOT n.shared AND n.concurrency_key IS NULL
    ),
    -- Unlimited tenants' lanes are claimed in parallel: their jobs are locked (SKIP LOCKED),
    -- first the arrivals before the mark (they come first in lane order), then from the mark
    -- on, as far as it takes. MATERIALIZED: the locking runs once per lane.
    early AS MATERIALIZED (
      SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.ctid = ANY (ARRAY(
                SELECT a.tid FROM arr a
                WHERE a.queue = n.queue AND a.tenant = n.tenant
                  AND (a.expires_at IS NULL OR a.expires_at > now())))
          AND j.state IS NOT DISTINCT FROM 'available'  -- see the claim below
        ORDER BY j.priority, j.id
        LIMIT least(n.free, n.share)
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    late AS MATERIALIZED (
      SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND (j.priority, j.id) > (n.m_priority, n.m_id)
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT least(n.free, n.share) - (SELECT count(*) FROM early e WHERE e.queue = n.queue AND e.tenant = n.tenant)
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    locked AS (
      SELECT e.* FROM early e UNION ALL SELECT l.* FROM late l
    ),
    picked AS (
      -- key lanes of limited tenants: no row locks, since no other claim can pick their jobs
      SELECT p.id, p.tid, p.priority, n.queue, n.tenant, n.concurrency_key, n.free, n.key_free,
             n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND j.concurrency_key = n.concurrency_key
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT greatest(0, least(n.free, coalesce(n.key_free, n.free)))
      ) p
      WHERE NOT n.shared AND n.concurrency_key IS NOT NULL
      UNION ALL
      -- limited tenants without a per-key limit: the pair's candidates, no row locks either
      SELECT c.id, c.tid, c.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
             n.last_served_at
      FROM lanes n JOIN cands c ON c.queue = n.queue AND c.tenant = n.tenant
      WHERE NOT n.shared AND n.concurrency_key IS NULL
      UNION ALL
      -- unlimited tenants: what this claim locked
      SELECT k.id, k.tid, k.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
             n.last_served_at
      FROM locked k
      JOIN lanes n ON n.queue = k.queue AND n.tenant = k.tenant AND n.concurrency_key IS NULL
    ),
    keyed AS (  -- a key's lanes in several queues share its limit
      SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.concurrency_key ORDER BY p.priority, p.id) AS rk
      FROM picked p
    ),
    ranked AS (
      SELECT k.id, k.tid, k.queue, k.tenant, k.priority, k.free, k.last_served_at,
             row_number() OVER (PARTITION BY k.tenant ORDER BY k.priority, k.id) AS rn
      FROM keyed k WHERE k.key_free IS NULL OR k.rk <= k.key_free
    ),
    chosen AS MATERIALIZED (
      SELECT r.* FROM ranked r WHERE r.rn <= least(r.free, (SELECT s.n FROM share s))
      ORDER BY r.rn, r.last_served_at, r.tenant
      LIMIT v_left
    )
    -- the chosen jobs, each array in the same order (step 4 zips them), and the old marks
    -- of the pair lanes chosen from, for the new marks of step 4
    SELECT c.ids, c.tids, c.queues, c.tenants, c.priorities,
           m.queues, m.tenants, m.priorities, m.ids, m.snaps, (SELECT s.n FROM share s)
    FROM (SELECT coalesce(array_agg(h.id ORDER BY h.rn, h.last_served_at, h.tenant), '{}') AS ids,
                 array_agg(h.tid ORDER BY h.rn, h.last_served_at, h.tenant) AS tids,
                 array_agg(h.queue ORDER BY h.rn, h.last_served_at, h.tenant) AS queues,
                 array_agg(h.tenant ORDER BY h.rn, h.last_served_at, h.tenant) AS tenants,
                 array_agg(h.priority ORDER BY h.rn, h.last_served_at, h.tenant) AS priorities
          FROM chosen h) c,
         (SELECT array_agg(n.queue) AS queues, array_agg(n.tenant) AS tenants,
                 array_agg(n.m_priority) AS priorities, array_agg(n.m_id) AS ids, array_agg(n.m_snap) AS snaps
          FROM lanes n
          WHERE n.concurrency_key IS NULL
            AND EXISTS (SELECT 1 FROM chosen h WHERE h.queue = n.queue AND h.tenant = n.tenant)) m
    INTO v_ids, v_tids, v_queues, v_tenants, v_priorities,
         v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps, v_share;
    IF cardinality(v_ids) = 0 THEN RETURN; END IF;

    -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
    --    expired) has moved or is no longer available, and is left out. A rate-limited
    --    tenant's row is locked by this claim, so its starts are always counted.
    RETURN QUERY
    WITH claimed AS (
      UPDATE :SCHEMA.jobs j
      SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
          lease_token = nextval(':SCHEMA.lease_tokens'),
          started_at = v_now, lease_until = now() + p_lease_ms * interval '1 millisecond'
      -- IS NOT DISTINCT FROM: the same test (state is never null), but one that no partial
      -- index on `state = 'available'` matches, so the plan is a TID scan and not a whole
      -- scan of such an index, dead entries and all
      WHERE j.ctid = ANY (v_tids) AND j.state IS NOT DISTINCT FROM 'available'
      RETURNING j.*
    ),
    served AS (
      INSERT INTO :SCHEMA.tenant_serves (tenant) SELECT DISTINCT c.tenant FROM claimed c
    ),
    rated AS (
      UPDATE :SCHEMA.tenants t SET
        rate_window = :SCHEMA.rate_window(t.rate_per_ms, v_now),
        rate_used = n.n + t.rate_limit - :SCHEMA.rate_left(t, v_now)
      FROM (SELECT c.tenant, count(*)::integer AS n FROM claimed c GROUP BY c.tenant) n
      WHERE t.tenant = n.tenant AND t.rate_limit IS NOT NULL
    )
    SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
    ORDER BY o.ord;

    -- 4. The lanes' new marks, under a snapshot that sees this claim's own updates: a mark
    --    is valid when no job available in its snapshot sits at or before its position.
    --    Before the old mark, only arrivals since the old mark's snapshot can (none must be
    --    left); after it, the mark goes to the furthest job this claim took before the
    --    first job still available there — one a parallel claim holds (it may yet roll
    --    back), one committed late, or the next in line.
    -- the arrivals behind the old marks, read once for all the lanes
    WITH arr AS MATERIALIZED (
      SELECT a.* FROM :SCHEMA.arrivals_behind(
        v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps) a
    )
    INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap)
    SELECT l.queue, l.tenant, p.priority, p.id, pg_current_snapshot()
    FROM unnest(v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids)
         AS l(queue, tenant, priority, id)
    LEFT JOIN LATERAL (
      SELECT j.priority, j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = l.queue AND j.tenant = l.tenant
        AND (j.priority, j.id) > (l.priority, l.id) AND (j.expires_at IS NULL OR j.expires_at > now())
      ORDER BY j.priority, j.id
      LIMIT 1
    ) f ON true
    CROSS JOIN LATERAL (
      SELECT c.priority, c.id FROM unnest(v_ids, v_queues, v_tenants, v_priorities) AS c(id, queue, tenant, priority)
      WHERE c.queue = l.queue AND c.tenant = l.tenant AND (c.priority, c.id) > (l.priority, l.id)
        AND (f.id IS NULL OR (c.priority, c.id) < (f.priority, f.id))
      ORDER BY c.priority DESC, c.id DESC
      LIMIT 1
    ) p
    WHERE NOT EXISTS (
      SELECT 1 FROM arr a
      WHERE a.queue = l.queue AND a.tenant = l.tenant
        AND (a.expires_at IS NULL OR a.expires_at > now()));

    v_left := v_left - cardinality(v_ids);
    SELECT array_agg(c.t) INTO v_full FROM (
      SELECT t FROM unnest(v_tenants) t GROUP BY t HAVING count(*) >= v_share) c;
    EXIT WHEN v_left <= 0 OR v_full IS NULL;
    v_candidates := v_full;
  END LOOP;
END $$;
