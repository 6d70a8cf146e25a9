-- The lease API's own search for run-out leases, paced by its cost.
--
-- fetch_jobs (the lease of HTTP and SQL consumers) gives back run-out leases itself, so
-- that consumers with no Tusk process beside them still recover from a crash. It searched
-- on every call, on jobs_running, which keeps an entry for every job that ran since a
-- pinned horizon began: after 110 000 jobs under a pin a fetch of none took 8.6 ms and a
-- fetch of one 12.6 ms (the claim inside it 4.0; 3.3 and 4.8 ms with this change), and
-- the search grows with every job run while the horizon stays pinned (at 10 000 jobs/s,
-- 1.8 million entries in three minutes), on every fetch of every consumer.
--
-- Now each queue and tenant a fetch asks for (either may be all) keeps a pace of its own:
-- its fetches search on every call while a search takes under 5 ms (a few thousand
-- running jobs, no pin); once one took longer, the next comes after 10 times as long (at
-- most a minute), one fetch at a time (the one whose transaction holds the search's
-- lock, until it ends). A lease that runs out meanwhile comes back that much later. The
-- pace lives apart from the upkeep's (reap's, in lane_prune): a fetch never moves the
-- upkeep's next search, and the upkeep never waits for a fetch. A fetch writes only when
-- its search changes the pace (a slow one, or a quick one after a slow one), and only
-- appends: no row of it is ever locked, updated or deleted by a fetch, so no fetch waits
-- for another and none fails a REPEATABLE READ caller. The upkeep deletes the records
-- that no longer set a pace (with no upkeep running, they pile up, a row per slow
-- search, while searches stay slow).

CREATE TABLE :SCHEMA.fetch_searches (
  seq bigserial PRIMARY KEY,
  -- the fetch's queue and tenant: '=' and the name, or '*' for all (apart from any name,
  -- even an empty one)
  queue text NOT NULL,
  tenant text NOT NULL,
  at timestamptz NOT NULL,
  ms double precision NOT NULL
);
CREATE INDEX fetch_searches_newest ON :SCHEMA.fetch_searches (queue, tenant, seq DESC);

CREATE OR REPLACE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_queue text := coalesce('=' || p_queue, '*');
  v_tenant text := coalesce('=' || p_tenant, '*');
  -- the lock of this queue and tenant's search (\x1f: no name has it)
  v_lock integer := hashtext(v_queue || E'\x1f' || v_tenant);
  v_at timestamptz;
  v_last double precision;
  v_start timestamptz;
  v_ms double precision;
  v_lost bigint[];
BEGIN
  SELECT s.at, s.ms INTO v_at, v_last FROM :SCHEMA.fetch_searches s
  WHERE s.queue = v_queue AND s.tenant = v_tenant ORDER BY s.seq DESC LIMIT 1;
  -- due: no slow search, or the wait after one over (a clock gone back counts as over)
  -- and no other fetch of this queue and tenant searching
  IF v_at IS NULL OR v_last < 5
     OR ((clock_timestamp() < v_at
          OR clock_timestamp() >= v_at + least(10 * v_last, 60000) * interval '1 millisecond')
         AND pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':lost-leases'), v_lock)) THEN
    v_start := clock_timestamp();
    v_lost := ARRAY(
      SELECT j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'running' AND j.lease_until < now()
        AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
      LIMIT 100);
    v_ms := extract(epoch FROM clock_timestamp() - v_start) * 1000;
    IF (v_ms >= 5 OR coalesce(v_last, 0) >= 5)
       AND pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':lost-leases'), v_lock) THEN
      INSERT INTO :SCHEMA.fetch_searches (queue, tenant, at, ms) VALUES (v_queue, v_tenant, v_start, v_ms);
    END IF;
    PERFORM :SCHEMA.requeue_lost(v_lost);
  END IF;
  PERFORM :SCHEMA.promote_due_jobs(1000);
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;

-- The records that no longer set a pace: replaced by a newer one of the same queue and
-- tenant, older than the longest wait (a minute), or of a quick search. Either of the
-- last two is read as no record at all.
CREATE FUNCTION :SCHEMA.prune_fetch_searches() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
BEGIN
  DELETE FROM :SCHEMA.fetch_searches s
  WHERE s.at < now() - interval '1 minute' OR s.ms < 5
     OR EXISTS (SELECT 1 FROM :SCHEMA.fetch_searches n
                WHERE n.queue = s.queue AND n.tenant = s.tenant AND n.seq > s.seq);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;

-- The upkeep, as in 000030, with that step added.
CREATE OR REPLACE FUNCTION :SCHEMA.maintain(p_grace_ms integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_done jsonb := '{}';
  v_errors jsonb := '[]';
  r record;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(':SCHEMA'), 0) THEN
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
  BEGIN
    v_done := v_done || jsonb_build_object('idlePairs', :SCHEMA.prune_lanes());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'lanes', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('fetchSearches', :SCHEMA.prune_fetch_searches());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fetchSearches', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  -- last: writers wait for the fold's lock until this transaction ends
  BEGIN
    v_done := v_done || jsonb_build_object('folded', :SCHEMA.fold_running());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fold', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  RETURN v_done || jsonb_build_object('errors', v_errors);
END $$;

COMMENT ON FUNCTION :SCHEMA.maintain(integer) IS
'The queue''s upkeep, one process at a time (advisory lock): gives back the jobs of leases
that ran out and of dead workers (after p_grace_ms when the server restarted), promotes
due delayed jobs, expires old ones, keeps history partitions ahead, prunes lane marks,
serves and pairs and the lease API''s replaced search records, and folds running deltas;
each step isolated, its failure reported without stopping the others.';
