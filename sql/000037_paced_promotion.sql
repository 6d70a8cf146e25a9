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
-- Now the fetches promote on every call while a promotion takes under 20 ms, and after a
-- slower one the next comes after 10 times as long (at most a minute), one fetch at a
-- time: the same pace, kept in fetch_searches under the key '!promote' (no queue's key
-- starts with '!'), shared by every fetch since a promotion is of every queue. A
-- promotion that promoted a whole batch is not slow, whatever its length: its time went
-- to the jobs it promoted, and more may be due. A job that comes due while promotions
-- are slow is promoted that much later (later still while the fetch that holds the turn
-- keeps its transaction open), or by the upkeep, which promotes on every pass whatever
-- this pace.
--
-- The first fetch of a session records no promotion pace: its time includes making the
-- session's plans (5–13 ms measured on a loaded machine), and that pace would be every
-- fetch's. The pace's two halves are functions shared by both searches; fetch_jobs is
-- otherwise the same.

COMMENT ON COLUMN :SCHEMA.fetch_searches.queue IS
'The queue of the fetches whose search this paces: ''='' and the name, ''*'' for all, or
''!promote'' for every fetch''s promotion of due jobs.';

-- Whether a fetch searches now under the pace of (p_queue, p_tenant): no search slower
-- than p_slow_ms on record, or the wait after one over (a clock gone back counts as over)
-- and the turn taken (the transaction-scoped advisory lock p_space/p_key: one fetch at a
-- time). `last` is the recorded search's length, for fetch_record.
CREATE FUNCTION :SCHEMA.fetch_turn(p_queue text, p_tenant text, p_space integer, p_key integer,
  p_slow_ms double precision, OUT due boolean, OUT last double precision)
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_at timestamptz;
BEGIN
  SELECT s.at, s.ms INTO v_at, last FROM :SCHEMA.fetch_searches s
  WHERE s.queue = p_queue AND s.tenant = p_tenant ORDER BY s.seq DESC LIMIT 1;
  due := v_at IS NULL OR last < p_slow_ms
    OR ((clock_timestamp() < v_at
         OR clock_timestamp() >= v_at + least(10 * last, 60000) * interval '1 millisecond')
        AND pg_try_advisory_xact_lock(p_space, p_key));
END $$;

-- Records a search of p_ms begun at p_at when it changes the pace (a slow one, or a quick
-- one after a slow one), under the turn: appended, never updated, so no fetch waits for
-- another.
CREATE FUNCTION :SCHEMA.fetch_record(p_queue text, p_tenant text, p_space integer, p_key integer,
  p_slow_ms double precision, p_at timestamptz, p_ms double precision, p_last double precision)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF (p_ms >= p_slow_ms OR coalesce(p_last, 0) >= p_slow_ms) AND pg_try_advisory_xact_lock(p_space, p_key) THEN
    INSERT INTO :SCHEMA.fetch_searches (queue, tenant, at, ms) VALUES (p_queue, p_tenant, p_at, p_ms);
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
      WHERE j.state = 'running' AND j.lease_until < now()
        AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
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
