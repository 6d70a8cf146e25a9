-- fetch_jobs refuses a lease without a length, and a count of NULL.
--
-- fetch_jobs(count, NULL, ...) leased its jobs with lease_until NULL: a NULL lease end is
-- never "run out" (lease_until < now() is NULL), and a fetched job has no worker whose
-- death would give it back, so the job stayed running for good, its tenant's slot with
-- it (extend_lease had the same fault, mended by 000048). A lease of 0 or less was over as
-- it was handed out: the next look gave the job back, an attempt counted. And
-- fetch_jobs(NULL, ...) leased every available job of the queue (a NULL limit is no
-- limit). All are now refused with the argument named, before anything is read or
-- written; a count of 0 or less still leases nothing. The library and the HTTP API
-- already refused them. The body is 000062's but for these checks.

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
  IF p_count IS NULL THEN
    PERFORM :SCHEMA.arg_refuse('count', 'must be given (how many jobs to lease at most)');
  END IF;
  IF p_lease_ms IS NULL OR p_lease_ms < 1 THEN
    PERFORM :SCHEMA.arg_refuse('lease_ms', format(
      'must be a lease length in milliseconds, 1 or more (got %s)', coalesce(p_lease_ms::text, 'NULL')));
  END IF;
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
