-- fetch_jobs gives back the expired leases of its tenant in every queue, not only the
-- queue it reads.
--
-- A tenant's slots count its running jobs in all queues. With consumers that only fetch
-- (SQL, HTTP) and no upkeep process, a lease that ran out in queue A held the tenant's slot
-- against every fetch from queue B until someone fetched from A again: a consumer of A that
-- died for good took the slot with it, and "SQL consumers alone keep crash recovery" did
-- not hold. The search reads jobs_running, keyed by tenant, so leaving the queue out costs
-- it nothing; its pace is as before. The body is 000037's but for that predicate.

CREATE OR REPLACE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_queue text := coalesce('=' || p_queue, '*');
  v_tenant text := coalesce('=' || p_tenant, '*');
  -- the turn of this queue and tenant's search (\x1f: no name has it)
  v_leases integer := hashtext(:SCHEMA_LITERAL || ':lost-leases');
  v_lock integer := hashtext(v_queue || E'\x1f' || v_tenant);
  v_due integer := hashtext(:SCHEMA_LITERAL || ':due-jobs');
  -- set once this session has fetched: its first promotion's time includes making its
  -- plans, and that promotion's pace would be every fetch's
  v_setting text := 'tusk.fetched_' || md5(:SCHEMA_LITERAL);
  v_warm boolean := current_setting(v_setting, true) IS NOT DISTINCT FROM 'on';
  v_turn record;
  v_start timestamptz;
  v_ms double precision;
  v_lost bigint[];
  v_promoted integer;
BEGIN
  v_turn := :SCHEMA.fetch_turn(v_queue, v_tenant, v_leases, v_lock, 5);
  IF v_turn.due THEN
    v_start := clock_timestamp();
    v_lost := ARRAY(
      SELECT j.id FROM :SCHEMA.jobs j
      -- of every queue: a tenant's slots count its running jobs in all of them
      WHERE j.state = 'running' AND j.lease_until < now()
        AND (p_tenant IS NULL OR j.tenant = p_tenant)
      LIMIT 100);
    v_ms := extract(epoch FROM clock_timestamp() - v_start) * 1000;
    PERFORM :SCHEMA.fetch_record(v_queue, v_tenant, v_leases, v_lock, 5, v_start, v_ms, v_turn.last);
    PERFORM :SCHEMA.requeue_lost(v_lost);
  END IF;
  v_turn := :SCHEMA.fetch_turn('!promote', '*', v_due, 0, 20);
  IF v_turn.due THEN
    v_start := clock_timestamp();
    v_promoted := :SCHEMA.promote_due_jobs(1000);
    -- a whole batch: the time went to the jobs promoted, and more may be due
    v_ms := CASE WHEN v_promoted >= 1000 THEN 0
                 ELSE extract(epoch FROM clock_timestamp() - v_start) * 1000 END;
    IF v_warm THEN
      PERFORM :SCHEMA.fetch_record('!promote', '*', v_due, 0, 20, v_start, v_ms, v_turn.last);
    END IF;
  END IF;
  IF NOT v_warm THEN
    PERFORM set_config(v_setting, 'on', false);
  END IF;
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;
