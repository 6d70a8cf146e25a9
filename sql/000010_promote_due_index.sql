-- promote_due_jobs compared run_at with clock_timestamp() in the scan itself: a volatile
-- value is no index bound, so every upkeep (every 500 ms) walked the whole jobs_due index
-- and read each scheduled job's row to filter it. With 1 000 000 jobs scheduled for later,
-- one upkeep took 1.6 s and halved a worker's drain rate. Read the clock once instead.
CREATE OR REPLACE FUNCTION :SCHEMA.promote_due_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  v_now timestamptz := clock_timestamp();
BEGIN
  WITH due AS (
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state IN ('scheduled', 'failed') AND j.run_at <= v_now
    ORDER BY j.run_at LIMIT p_limit
    FOR UPDATE SKIP LOCKED
  )
  UPDATE :SCHEMA.jobs j SET state = 'available' FROM due WHERE j.id = due.id;
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
  RETURN n;
END $$;
