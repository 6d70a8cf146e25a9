-- The lock a history partition made holds, held no longer than the partition work needs.
--
-- Making a day's partition locks job_history against writers (000049: SHARE ROW EXCLUSIVE
-- when the day's rows are moved out of the default partition; CREATE ... PARTITION OF takes
-- ACCESS EXCLUSIVE) until the upkeep's transaction ends. Everything after it in that
-- transaction ran under the lock, and completions, into any partition, waited: in the same
-- pass the next day's rows moved out of the default partition (200 000 rows: a completion
-- into today's partition waited 1.52 s, 0.09 before 000049), then in maintain the lane,
-- search and fold steps, in maintain_history the pruning's batch.
--
-- Now a pass makes at most one day from rows of the default partition, and none after
-- another day was made (the next pass makes it: its rows are moved before any lock; the
-- history upkeep and prune() call again at once, maintain_history saying `more`);
-- maintain makes partitions after every step but the fold, maintain_history after its
-- pruning.

-- As in 000049, but a pass that made a day from rows of the default partition stops there,
-- and a day with such rows is left for the next pass once this one made a partition.
CREATE OR REPLACE FUNCTION :SCHEMA.ensure_history_partitions(p_days_ahead integer DEFAULT 3)
RETURNS integer LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  d date;
  v_stray boolean;
  created integer := 0;
BEGIN
  -- before reading the default partition: that read's lock would time the other's DDL out
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':partitions'), 0) THEN
    RETURN 0;
  END IF;
  FOR d, v_stray IN
    SELECT x.day, bool_or(x.stray) FROM (
      SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1,
                             (now() AT TIME ZONE 'UTC')::date + p_days_ahead, '1 day')::date, false
      UNION ALL
      SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date, true FROM :SCHEMA.job_history_default h
    ) x(day, stray)
    GROUP BY x.day
    ORDER BY x.day
  LOOP
    -- its rows would be moved under the lock the partition made holds
    CONTINUE WHEN v_stray AND created > 0;
    BEGIN
      IF :SCHEMA.create_history_partition(d) THEN
        created := created + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      NULL;  -- the next upkeep tries again (the partitions are made days ahead)
    END;
    EXIT WHEN v_stray AND created > 0;
  END LOOP;
  RETURN created;
END $$;

-- As in 000034, but history partitions are made after the other steps, before the fold.
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
    v_done := v_done || jsonb_build_object('idlePairs', :SCHEMA.prune_lanes());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'lanes', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('fetchSearches', :SCHEMA.prune_fetch_searches());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fetchSearches', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  -- late: a partition made holds job_history's lock until this transaction ends (completions
  -- wait), so no other step runs after it but the fold
  BEGIN
    v_done := v_done || jsonb_build_object('partitions', :SCHEMA.ensure_history_partitions());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'partitions', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  -- last: writers wait for the fold's lock until this transaction ends
  BEGIN
    v_done := v_done || jsonb_build_object('folded', :SCHEMA.fold_running());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fold', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  RETURN v_done || jsonb_build_object('errors', v_errors);
END $$;

-- As in 000030, but partitions are made after the pruning: the lock of a partition made is
-- held to the end of the transaction, and the pruning's batch would run under it. `more`
-- also when a day was made and rows are left in the default partition (days left for the
-- next pass): callers call again until it is false.
CREATE OR REPLACE FUNCTION :SCHEMA.maintain_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_pruned jsonb;
  v_created integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':history'), 0) THEN
    RETURN NULL;
  END IF;
  v_pruned := :SCHEMA.prune_history(p_batch);
  v_created := :SCHEMA.ensure_history_partitions();
  RETURN v_pruned || jsonb_build_object(
    'created', v_created,
    'more', (v_pruned ->> 'more')::boolean
            OR (v_created > 0 AND EXISTS (SELECT 1 FROM :SCHEMA.job_history_default)));
END $$;
