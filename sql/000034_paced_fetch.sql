-- The lease API's own search for run-out leases, paced like the upkeep's.
--
-- fetch_jobs (the lease of HTTP and SQL consumers) gives back run-out leases itself, so
-- that consumers with no Tusk process beside them still recover from a crash. It searched
-- on every call, on jobs_running, which keeps an entry for every job that ran since a
-- pinned horizon began: after 50 000 jobs under a pin a fetch of one job took 10.4 ms
-- against 2.1 ms for the claim inside it, and the search grows with every job run while
-- the horizon stays pinned (at 10 000 jobs/s, 1.8 million entries in three minutes), on
-- every fetch of every consumer.
--
-- It now keeps to a pace, in the upkeep's own row (reap's, 000032): every call searches
-- while a search takes under 5 ms (a few thousand running jobs, no pin); once one took
-- longer, the next comes after 10 times as long (at most a minute), and one fetch
-- searches at a time, so the searches take at most about a tenth of the fetches' time.
-- A lease that runs out meanwhile comes back that much later, as with the upkeep, which
-- keeps its own threshold (100 ms, one search a pass) on the same figures. A fetch
-- records its search's cost only when that changes the pace (a slow search, or a quick
-- one after a slow one): no write while searches are quick; and it does not wait for the
-- row when the upkeep holds it.

CREATE OR REPLACE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_pace :SCHEMA.lane_prune;
  v_start timestamptz;
  v_ms double precision;
  v_lost bigint[];
BEGIN
  SELECT * INTO v_pace FROM :SCHEMA.lane_prune;
  -- due: a quick search, or the wait after a slow one over (a clock gone back counts as
  -- over) and no other fetch searching
  IF v_pace.reap_searched_at IS NULL OR v_pace.reap_search_ms < 5
     OR ((clock_timestamp() < v_pace.reap_searched_at
          OR clock_timestamp() >= v_pace.reap_searched_at
                                  + least(10 * v_pace.reap_search_ms, 60000) * interval '1 millisecond')
         AND pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':lost-leases'), 0)) THEN
    v_start := clock_timestamp();
    v_lost := ARRAY(
      SELECT j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'running' AND j.lease_until < now()
        AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
      LIMIT 100);
    v_ms := extract(epoch FROM clock_timestamp() - v_start) * 1000;
    IF v_ms >= 5 OR v_pace.reap_search_ms >= 5 THEN
      PERFORM 1 FROM :SCHEMA.lane_prune FOR UPDATE SKIP LOCKED;
      IF FOUND THEN
        UPDATE :SCHEMA.lane_prune SET reap_searched_at = v_start, reap_search_ms = v_ms;
      END IF;
    END IF;
    PERFORM :SCHEMA.requeue_lost(v_lost);
  END IF;
  PERFORM :SCHEMA.promote_due_jobs(1000);
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;
