-- History day partitions made while completions go on, and by one upkeep pass at a time.
--
-- A day whose rows are in the default partition (no upkeep ran for a while: today's
-- completions went there) has its partition built aside, the rows moved into it, then
-- attached. Completions of that day went on meanwhile, into the default partition: one
-- committed before the ATTACH made it fail (check_violation), which undid the whole
-- ensure_history_partitions pass (maintain reported it, maintain_history failed); one
-- written after the ATTACH, before its commit, had been routed to the default partition
-- and waited for the ATTACH's lock on it, then failed itself (the default partition no
-- longer takes that day): a completion lost. The path of a day with no such rows had the
-- first gap too, between its look at the default partition and CREATE ... PARTITION OF.
--
-- Now the rows are moved as before, with no lock on job_history, then job_history itself
-- is locked in SHARE ROW EXCLUSIVE mode (ONLY: not its partitions), the rows that came in
-- meanwhile are moved and the partition is attached. That mode keeps out writers, not
-- readers, and writers take it before choosing a partition: a completion of that day waits
-- for the commit and goes to the new partition. Completions wait for the rows that came in
-- during the move and the ATTACH, not for the whole move; the lock is waited for at most
-- 50 ms (try_ddl), else the day is left for the next upkeep, as any partition DDL here is;
-- it is held to the end of the caller's transaction, as the lock of CREATE ... PARTITION OF
-- (ACCESS EXCLUSIVE, readers too) always was.
--
-- Two passes at once (maintain and maintain_history in two processes) did not fail on a
-- duplicate table: a pass reads the default partition first, and that lock, held to its
-- commit, keeps the other from creating or attaching any partition. But they got in each
-- other's way: the second waited, without a time limit, for the first's table of the same
-- name, holding the lock the first's ATTACH then timed out on, and the first's move was
-- thrown away. Now a pass takes a transaction-level advisory lock first and, while another
-- pass holds it, does nothing (returns 0): the other makes the same partitions.

-- As in 000030, but the rows of the day that come in during the move are moved too, under
-- a lock that keeps new ones out until the partition is attached and committed.
CREATE OR REPLACE FUNCTION :SCHEMA.create_history_partition(p_day date)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_part text := 'job_history_' || to_char(p_day, 'YYYYMMDD');
  v_lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
  v_hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
  v_aside text := format('CREATE TABLE %I.%I (LIKE %I.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
                            CONSTRAINT in_range CHECK (finished_at >= %L AND finished_at < %L))',
                         :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi);
  v_move text := format('WITH moved AS (DELETE FROM %I.job_history_default WHERE finished_at >= $1 AND finished_at < $2
                         RETURNING *) INSERT INTO %I.%I SELECT * FROM moved', :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part);
  v_aside_made boolean := false;
BEGIN
  IF to_regclass(format('%I.%I', :SCHEMA_LITERAL, v_part)) IS NOT NULL THEN
    RETURN false;
  END IF;
  -- the bulk of the day's rows, while completions go on (some into the default partition)
  IF EXISTS (SELECT 1 FROM :SCHEMA.job_history_default d
             WHERE d.finished_at >= v_lo AND d.finished_at < v_hi) THEN
    EXECUTE v_aside;
    EXECUTE v_move USING v_lo, v_hi;
    v_aside_made := true;
  END IF;
  -- from here to the commit no row enters job_history. Every failure below raises, so
  -- that the caller's subtransaction ends and lets go of the lock.
  IF NOT :SCHEMA.try_ddl(format('LOCK TABLE ONLY %I.job_history IN SHARE ROW EXCLUSIVE MODE', :SCHEMA_LITERAL)) THEN
    RAISE lock_not_available USING MESSAGE = 'job_history is busy: partition ' || v_part || ' not made';
  END IF;
  IF NOT v_aside_made THEN
    IF NOT EXISTS (SELECT 1 FROM :SCHEMA.job_history_default d
                   WHERE d.finished_at >= v_lo AND d.finished_at < v_hi) THEN
      IF NOT :SCHEMA.try_ddl(format(
        'CREATE TABLE %I.%I PARTITION OF %I.job_history FOR VALUES FROM (%L) TO (%L)',
        :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi)) THEN
        RAISE lock_not_available USING MESSAGE = 'job_history is busy: partition ' || v_part || ' not made';
      END IF;
      RETURN true;
    END IF;
    EXECUTE v_aside;
  END IF;
  -- the rows committed since the first move's snapshot
  EXECUTE v_move USING v_lo, v_hi;
  -- the check constraint lets ATTACH skip scanning the new table
  IF NOT :SCHEMA.try_ddl(format('ALTER TABLE %I.job_history ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                                :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part, v_lo, v_hi)) THEN
    RAISE lock_not_available USING MESSAGE = 'job_history is busy: partition ' || v_part || ' not attached';
  END IF;
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT in_range', :SCHEMA_LITERAL, v_part);
  RETURN true;
END $$;

-- Creates the daily history partitions from yesterday to p_days_ahead days ahead (UTC
-- days), and those of past days found in the default partition. Returns how many: 0 at
-- once while another pass is under way (it makes them).
CREATE OR REPLACE FUNCTION :SCHEMA.ensure_history_partitions(p_days_ahead integer DEFAULT 3)
RETURNS integer LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  d date;
  created integer := 0;
BEGIN
  -- before reading the default partition: that read's lock would time the other's DDL out
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':partitions'), 0) THEN
    RETURN 0;
  END IF;
  FOR d IN
    SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1,
                           (now() AT TIME ZONE 'UTC')::date + p_days_ahead, '1 day')::date
    UNION
    SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM :SCHEMA.job_history_default h
    ORDER BY 1
  LOOP
    BEGIN
      IF :SCHEMA.create_history_partition(d) THEN
        created := created + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      NULL;  -- the next upkeep tries again (the partitions are made days ahead)
    END;
  END LOOP;
  RETURN created;
END $$;
