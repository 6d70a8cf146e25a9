-- The lease API's promotion of due jobs, paced by its cost like its search for run-out
-- leases (000034).
--
-- fetch_jobs promotes the delayed and retried jobs that came due (promote_due_jobs) on
-- every call, so that consumers with no Tusk process beside them still see them. That
-- reads jobs_due from its front, where every job promoted since a pinned horizon began
-- leaves a dead entry: after 100 000 jobs came due and were promoted under a pin, a
-- promotion with nothing due took 34 ms instead of 0.6, and a fetch of none from another
-- queue 17 ms instead of 1.5.
--
-- Now the fetches promote on every call while a promotion takes under 5 ms, and after a
-- slower one the next comes after 10 times as long (at most a minute), one fetch at a
-- time: the same pace, kept in fetch_searches under the key '!promote' (no queue's key
-- starts with '!'), shared by every fetch since a promotion is of every queue. A job that
-- comes due meanwhile is promoted that much later, or by the upkeep, which promotes on
-- every pass whatever this pace. The pace's two halves are functions shared by both
-- searches; fetch_jobs is otherwise the same.

-- Whether a fetch searches now under the pace of (p_queue, p_tenant): no slow search on
-- record, or the wait after one over (a clock gone back counts as over) and the turn
-- taken (the transaction-scoped advisory lock p_space/p_key: one fetch at a time). `last`
-- is the recorded search's length, for fetch_record.
CREATE FUNCTION :SCHEMA.fetch_turn(p_queue text, p_tenant text, p_space integer, p_key integer,
  OUT due boolean, OUT last double precision)
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_at timestamptz;
BEGIN
  SELECT s.at, s.ms INTO v_at, last FROM :SCHEMA.fetch_searches s
  WHERE s.queue = p_queue AND s.tenant = p_tenant ORDER BY s.seq DESC LIMIT 1;
  due := v_at IS NULL OR last < 5
    OR ((clock_timestamp() < v_at
         OR clock_timestamp() >= v_at + least(10 * last, 60000) * interval '1 millisecond')
        AND pg_try_advisory_xact_lock(p_space, p_key));
END $$;

-- Records a search begun at p_start when it changes the pace (a slow one, or a quick one
-- after a slow one), under the turn: appended, never updated, so no fetch waits for
-- another.
CREATE FUNCTION :SCHEMA.fetch_record(p_queue text, p_tenant text, p_space integer, p_key integer,
  p_start timestamptz, p_last double precision)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_ms double precision := extract(epoch FROM clock_timestamp() - p_start) * 1000;
BEGIN
  IF (v_ms >= 5 OR coalesce(p_last, 0) >= 5) AND pg_try_advisory_xact_lock(p_space, p_key) THEN
    INSERT INTO :SCHEMA.fetch_searches (queue, tenant, at, ms) VALUES (p_queue, p_tenant, p_start, v_ms);
  END IF;
END $$;

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
  v_turn record;
  v_start timestamptz;
  v_lost bigint[];
BEGIN
  v_turn := :SCHEMA.fetch_turn(v_queue, v_tenant, v_leases, v_lock);
  IF v_turn.due THEN
    v_start := clock_timestamp();
    v_lost := ARRAY(
      SELECT j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'running' AND j.lease_until < now()
        AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
      LIMIT 100);
    PERFORM :SCHEMA.fetch_record(v_queue, v_tenant, v_leases, v_lock, v_start, v_turn.last);
    PERFORM :SCHEMA.requeue_lost(v_lost);
  END IF;
  v_turn := :SCHEMA.fetch_turn('!promote', '*', v_due, 0);
  IF v_turn.due THEN
    v_start := clock_timestamp();
    PERFORM :SCHEMA.promote_due_jobs(1000);
    PERFORM :SCHEMA.fetch_record('!promote', '*', v_due, 0, v_start, v_turn.last);
  END IF;
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;
