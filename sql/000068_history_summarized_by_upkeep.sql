-- The history's BRIN index on finished_at is summarized by the history upkeep, not by
-- the autovacuum's work items.
--
-- With autosummarize on, every insert that starts a new range of 32 pages asks the
-- autovacuum to summarize the one before. The autovacuum keeps at most 256 such requests
-- and works them off when it visits the database (every autovacuum_naptime, a minute by
-- default); a queue finishing some thousands of jobs a second starts a range every few
-- hundred milliseconds, so the requests overflow and the server logs every one it drops —
-- "request for BRIN range summarization for index … was not recorded", hundreds of lines a
-- minute in a drain of a few minutes here — and the ranges stay unsummarized until a vacuum
-- of the partition, so the reads of the last minutes (metrics, the dashboard's charts)
-- read them all.
--
-- Now the last call of each pass of maintain_history (every minute, and prune()) summarizes the new ranges
-- of yesterday's partition onwards and of the default one, and turns autosummarize off on
-- any partition's index that still has it. A partitioned index's options cannot be
-- altered, and a partition's index copies them, so the parent keeps autosummarize on (see
-- its comment) and the partitions made days ahead have it off within a pass, before they
-- take rows. A partition being vacuumed is skipped: its vacuum summarizes it.

CREATE OR REPLACE FUNCTION :SCHEMA.summarize_history() RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
  v_from text := 'job_history_' || to_char((now() AT TIME ZONE 'UTC')::date - 1, 'YYYYMMDD');
  v_summarized integer := 0;
BEGIN
  FOR r IN
    SELECT t.relname AS part, ic.relname AS index, ic.oid AS index_oid,
           coalesce('autosummarize=on' = ANY (ic.reloptions), false) AS asks
    FROM pg_inherits ii
    JOIN pg_class ic ON ic.oid = ii.inhrelid
    JOIN pg_index x ON x.indexrelid = ic.oid
    JOIN pg_class t ON t.oid = x.indrelid
    WHERE ii.inhparent = to_regclass(format('%I.%I', :SCHEMA_LITERAL, 'job_history_finished'))
    ORDER BY t.relname
  LOOP
    IF r.asks AND NOT :SCHEMA.try_ddl(format('ALTER INDEX %I.%I SET (autosummarize = off)',
                                             :SCHEMA_LITERAL, r.index)) THEN
      CONTINUE;
    END IF;
    IF (r.part >= v_from OR r.part = 'job_history_default')
       AND :SCHEMA.try_ddl(format('LOCK TABLE %I.%I IN SHARE UPDATE EXCLUSIVE MODE',
                                  :SCHEMA_LITERAL, r.part)) THEN
      v_summarized := v_summarized + brin_summarize_new_values(r.index_oid);
    END IF;
  END LOOP;
  RETURN v_summarized;
END $$;

-- runs as the schema's owner (a BRIN index is summarized by its table's owner): for the
-- upkeep's roles only, as make_history_partitions
REVOKE EXECUTE ON FUNCTION :SCHEMA.summarize_history() FROM PUBLIC;

COMMENT ON FUNCTION :SCHEMA.summarize_history() IS
'Summarizes the new ranges of the BRIN index on job_history.finished_at in the partitions
that take rows (yesterday''s onwards, and the default one), and turns autosummarize off on
every partition''s index that has it (its requests overflow the autovacuum''s queue and are
logged one by one). A partition another session holds (a vacuum, which summarizes it) is
skipped. Returns the ranges summarized. Called by maintain_history.';

COMMENT ON INDEX :SCHEMA.job_history_finished IS
'autosummarize is on here only because a partitioned index''s options cannot be altered;
summarize_history turns it off on each partition''s index and summarizes them itself.';

-- As in 000053, and the BRIN index summarized once a pass: by the call that leaves no more
-- to do (a summary walks every range of a partition).
CREATE OR REPLACE FUNCTION :SCHEMA.maintain_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_pruned jsonb;
  r record;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':history'), 0) THEN
    RETURN NULL;
  END IF;
  v_pruned := :SCHEMA.prune_history(p_batch);
  SELECT * INTO r FROM :SCHEMA.make_history_partitions(3);
  IF NOT ((v_pruned ->> 'more')::boolean OR r.more) THEN
    PERFORM :SCHEMA.summarize_history();
  END IF;
  RETURN v_pruned || jsonb_build_object('created', r.created,
                                        'more', (v_pruned ->> 'more')::boolean OR r.more);
END $$;

SELECT :SCHEMA.summarize_history();
