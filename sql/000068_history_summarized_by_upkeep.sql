-- The history's BRIN index on finished_at is summarized by the history upkeep, not at
-- the autovacuum's request.
--
-- With autosummarize on, every insert that starts a new range of 32 pages asks the
-- autovacuum to summarize the one before. The autovacuum keeps at most 256 such requests
-- and works them off when it visits the database (every autovacuum_naptime, a minute by
-- default); a queue finishing some thousands of jobs a second starts a range every few
-- hundred milliseconds, so the requests overflow and the server logs every one it drops —
-- "request for BRIN range summarization for index … was not recorded", 58 lines in one
-- drain of 100 000 jobs here — and the ranges stay unsummarized until a vacuum of the
-- partition, so the reads of the last minutes (metrics, the dashboard's charts) read them
-- all.
--
-- Now each pass of the history upkeep summarizes the new ranges of the partitions that
-- take rows (summarize_history_index, in a transaction of its own after the retention's:
-- summarizing reads the new pages, about 0.6 ms a range, and must not run while a partition
-- made or dropped holds job_history's lock). A partitioned index's options cannot be
-- altered and a partition's index copies them, so the parent keeps autosummarize on (see
-- its comment) and each partition's index has it turned off: at once by the transaction
-- that makes the partition (no other session can see the index yet), and for the
-- partitions there are by the first summary, last in its transaction and without waiting
-- (ALTER INDEX holds the index against every writer until the commit). Partitions of
-- past days take no rows, so theirs ask for nothing and stay as they are.

-- Each partition of job_history with its BRIN index on finished_at, and whether that index
-- asks the autovacuum to summarize it.
CREATE OR REPLACE FUNCTION :SCHEMA.history_indexes()
RETURNS TABLE (part text, index text, index_oid oid, asks boolean)
LANGUAGE sql STABLE AS $$
  SELECT t.relname::text, ic.relname::text, ic.oid, coalesce('autosummarize=on' = ANY (ic.reloptions), false)
  FROM pg_inherits ii
  JOIN pg_class ic ON ic.oid = ii.inhrelid
  JOIN pg_index x ON x.indexrelid = ic.oid
  JOIN pg_class t ON t.oid = x.indrelid
  WHERE ii.inhparent = to_regclass(format('%I.%I', :SCHEMA_LITERAL, 'job_history_finished'))
$$;

-- Turns autosummarize off on the BRIN index of partition p_part (made in this transaction).
CREATE OR REPLACE FUNCTION :SCHEMA.history_index_unasked(p_part text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_index text := (SELECT h.index FROM :SCHEMA.history_indexes() h WHERE h.part = p_part);
BEGIN
  IF v_index IS NOT NULL THEN
    EXECUTE format('ALTER INDEX %I.%I SET (autosummarize = off)', :SCHEMA_LITERAL, v_index);
  END IF;
END $$;

-- As in 000049, and the new partition's BRIN index does not ask the autovacuum to summarize.
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
      PERFORM :SCHEMA.history_index_unasked(v_part);
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
  PERFORM :SCHEMA.history_index_unasked(v_part);
  RETURN true;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.summarize_history_index() RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
  v_from text := 'job_history_' || to_char((now() AT TIME ZONE 'UTC')::date - 1, 'YYYYMMDD');
  v_summarized integer := 0;
  v_asking text[] := '{}';
BEGIN
  FOR r IN
    SELECT h.* FROM :SCHEMA.history_indexes() h
    WHERE h.part >= v_from OR h.part = 'job_history_default' ORDER BY h.part
  LOOP
    -- the lock summarizing takes, without waiting: a vacuum (which summarizes) or an
    -- analyze of the partition holds it, and the next pass does it
    IF :SCHEMA.try_ddl(format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE', :SCHEMA_LITERAL, r.part)) THEN
      v_summarized := v_summarized + brin_summarize_new_values(r.index_oid);
    END IF;
    IF r.asks THEN
      v_asking := v_asking || r.index;
    END IF;
  END LOOP;
  -- Last, each without waiting: an index altered is held against every writer until the
  -- commit, which follows at once. Partitions made since 000068 have it off already.
  FOR i IN 1 .. cardinality(v_asking) LOOP
    PERFORM :SCHEMA.try_ddl(format('ALTER INDEX %I.%I SET (autosummarize = off)', :SCHEMA_LITERAL, v_asking[i]));
  END LOOP;
  RETURN v_summarized;
END $$;

-- runs as the schema's owner (a BRIN index is summarized by its table's owner): for the
-- upkeep's roles only, as make_history_partitions
REVOKE EXECUTE ON FUNCTION :SCHEMA.summarize_history_index() FROM PUBLIC;

COMMENT ON FUNCTION :SCHEMA.summarize_history_index() IS
'Summarizes the new ranges of the BRIN index on job_history.finished_at in the partitions
that take rows (yesterday''s onwards, and the default one), then turns autosummarize off on
those indexes that still have it (partitions made before 000068); a partition or index
another session holds (a vacuum, which summarizes it, or an analyze) is left for the next
call. Returns the ranges summarized. The history upkeep calls it once a pass, in a
transaction of its own.';

COMMENT ON INDEX :SCHEMA.job_history_finished IS
'autosummarize stays on here only because a partitioned index''s options cannot be altered;
each partition''s index has it off (its requests overflowed the autovacuum''s queue and were
logged one by one), and the history upkeep summarizes them (summarize_history_index).';
