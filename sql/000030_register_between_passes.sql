-- A worker registers between upkeep passes, never during one. A pass (maintain) decides
-- at its start which workers are dead (their session lock free), then hands back their
-- running jobs and deletes their rows. A worker whose connection came back within a pass
-- had the row it had just written deleted, and the jobs it claimed next handed back as a
-- dead worker's (no row) while it ran them: they ran twice. Registering now takes the
-- pass's lock, shared, for its transaction: it waits for a pass in progress to end (a
-- pass is short), and a pass that starts meanwhile is skipped (the next comes soon).
CREATE OR REPLACE FUNCTION :SCHEMA.register_worker(
  p_id integer, p_name text, p_host text, p_pid integer, p_queues text[],
  p_concurrency integer, p_version text
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_id integer := p_id;
BEGIN
  -- the key of maintain's lock (000023)
  PERFORM pg_advisory_xact_lock_shared(hashtext(':SCHEMA'), 0);
  IF v_id IS NOT NULL AND NOT pg_try_advisory_lock(hashtext(:SCHEMA_LITERAL), v_id) THEN
    v_id := NULL;
  END IF;
  IF v_id IS NULL THEN
    INSERT INTO :SCHEMA.workers (name, host, pid, queues, concurrency, version)
    VALUES (p_name, p_host, p_pid, p_queues, p_concurrency, p_version)
    RETURNING id INTO v_id;
    PERFORM pg_advisory_lock(hashtext(:SCHEMA_LITERAL), v_id);
  ELSE
    INSERT INTO :SCHEMA.workers (id, name, host, pid, queues, concurrency, version)
    VALUES (v_id, p_name, p_host, p_pid, p_queues, p_concurrency, p_version)
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = now();
  END IF;
  RETURN v_id;
END $$;
