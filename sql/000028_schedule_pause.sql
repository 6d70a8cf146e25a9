-- Pausing a schedule: a paused schedule enqueues no tick (the upkeep's due list leaves it
-- out), and the ticks it had enqueued ahead and not started are cancelled. Resumed, it
-- starts again at its next tick from now: the ticks of the pause are skipped, as nobody
-- wanted them run late (backfill is for downtime, not for a pause). Setting a paused
-- schedule again keeps it paused.
ALTER TABLE :SCHEMA.schedules ADD COLUMN paused_at timestamptz;

-- Pauses (p_paused) or resumes a schedule; on resume its next tick is p_next (computed
-- from its expression by the caller). NULL if there is no such schedule, else whether it
-- changed. The row lock waits for an upkeep pass firing the schedule, so the ticks that
-- pass enqueued are among those cancelled.
CREATE FUNCTION :SCHEMA.pause_schedule(p_name text, p_paused boolean, p_next timestamptz)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_paused_at timestamptz;
BEGIN
  SELECT s.paused_at INTO v_paused_at FROM :SCHEMA.schedules s WHERE s.name = p_name FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  IF p_paused = (v_paused_at IS NOT NULL) THEN RETURN false; END IF;
  IF p_paused THEN
    UPDATE :SCHEMA.schedules SET paused_at = now(), updated_at = now() WHERE name = p_name;
    -- the ticks cancelled are forgotten too: resumed within the same tick, it enqueues it again
    WITH ahead AS (
      SELECT r.job_id FROM :SCHEMA.schedule_runs r JOIN :SCHEMA.jobs j ON j.id = r.job_id
      WHERE r.schedule = p_name AND j.state = 'scheduled'),
    cancelled AS (
      SELECT c.id FROM :SCHEMA.finish_jobs('cancelled',
        (SELECT coalesce(jsonb_agg(jsonb_build_object('id', a.job_id)), '[]') FROM ahead a)) c)
    DELETE FROM :SCHEMA.schedule_runs r USING cancelled c WHERE r.schedule = p_name AND r.job_id = c.id;
  ELSE
    UPDATE :SCHEMA.schedules SET paused_at = NULL, next_run_at = p_next, updated_at = now() WHERE name = p_name;
  END IF;
  RETURN true;
END $$;
