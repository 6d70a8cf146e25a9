-- Editing a schedule redoes its ticks enqueued and not started; pausing or removing one
-- cancels them all, those already due included.
--
-- The upkeep enqueues ticks ahead (a second or so), as jobs holding the schedule's task,
-- payload, tenant, queue... of that moment. put_schedule changed the schedule's row only:
-- after an edit, the ticks already enqueued still ran under the old definition (old
-- payload, old expression's times). Now an edit that changes what a tick enqueues cancels
-- the schedule's tick jobs that have not started (scheduled, or available and never
-- claimed) and forgets their ticks; with the same expression and time zone the same ticks
-- are enqueued again at once under the new definition, with a new expression the schedule
-- goes on from the new one's next tick. Setting a schedule again unchanged (every start-up
-- does) leaves its jobs alone. pause_schedule and remove_schedule cancelled the ticks still
-- scheduled only: a tick already due, made available and waiting for a worker (a busy
-- queue) still ran after the pause or removal. Bodies: the baseline's (part 11) but for
-- that.

-- The schedule's tick jobs not started: still scheduled, or available and never claimed
-- (attempts 0; a job handed back unstarted has its attempt refunded). A retry of a run
-- that started is not a new tick and goes on.
CREATE FUNCTION :SCHEMA.schedule_jobs_not_started(p_name text)
RETURNS TABLE (job_id bigint, tick timestamptz) LANGUAGE sql STABLE AS $$
  SELECT r.job_id, r.tick FROM :SCHEMA.schedule_runs r JOIN :SCHEMA.jobs j ON j.id = r.job_id
  WHERE r.schedule = p_name AND j.state IN ('scheduled', 'available') AND j.attempts = 0
$$;

-- Creates or replaces a schedule (p_schedule: a row of schedules as JSON, next_run_at
-- included). An unchanged expression and time zone keep the next tick they had, so
-- re-applying a schedule at every deploy neither skips nor repeats a tick. A change to
-- what its ticks enqueue redoes the tick jobs not started (see above).
CREATE OR REPLACE FUNCTION :SCHEMA.put_schedule(p_schedule jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  s :SCHEMA.schedules := jsonb_populate_record(NULL:::SCHEMA.schedules,
    p_schedule || jsonb_build_object('created_at', now(), 'updated_at', now()));
  v_old :SCHEMA.schedules;
  v_ticks timestamptz[];
  v_tick timestamptz;
  v_id bigint;
BEGIN
  s.payload := coalesce(p_schedule -> 'payload', 'null');  -- JSON null is a payload, not NULL
  -- locked: an upkeep pass firing it has committed, and its ticks are among those read below
  SELECT * INTO v_old FROM :SCHEMA.schedules WHERE name = s.name FOR UPDATE;
  INSERT INTO :SCHEMA.schedules AS o SELECT s.*
  ON CONFLICT (name) DO UPDATE SET
    cron = excluded.cron, tz = excluded.tz, task = excluded.task, payload = excluded.payload,
    tenant = excluded.tenant, queue = excluded.queue, priority = excluded.priority,
    max_attempts = excluded.max_attempts, concurrency_key = excluded.concurrency_key,
    retry = excluded.retry, backfill = excluded.backfill, source = excluded.source,
    next_run_at = CASE WHEN o.cron = excluded.cron AND o.tz = excluded.tz THEN o.next_run_at
                       ELSE excluded.next_run_at END,
    updated_at = now()
  RETURNING * INTO s;
  IF v_old.name IS NULL OR (v_old.cron, v_old.tz, v_old.task, v_old.payload, v_old.tenant, v_old.queue,
                            v_old.priority, v_old.max_attempts, v_old.concurrency_key, v_old.retry)
     IS NOT DISTINCT FROM (s.cron, s.tz, s.task, s.payload, s.tenant, s.queue, s.priority, s.max_attempts,
                           s.concurrency_key, s.retry) THEN
    RETURN;  -- new, or set again unchanged: its jobs stand
  END IF;
  -- forgotten with their jobs, so that they can be enqueued again
  WITH cancelled AS (
    SELECT c.id FROM :SCHEMA.finish_jobs('cancelled', (
      SELECT coalesce(jsonb_agg(jsonb_build_object('id', n.job_id)), '[]')
      FROM :SCHEMA.schedule_jobs_not_started(s.name) n)) c),
  gone AS (
    DELETE FROM :SCHEMA.schedule_runs r USING cancelled c
    WHERE r.schedule = s.name AND r.job_id = c.id RETURNING r.tick)
  SELECT array_agg(g.tick ORDER BY g.tick) INTO v_ticks FROM gone g;
  -- a new expression's ticks are not these: the upkeep enqueues them from next_run_at
  IF v_old.cron <> s.cron OR v_old.tz <> s.tz OR s.paused_at IS NOT NULL THEN
    RETURN;
  END IF;
  -- as fire_schedule enqueues them
  FOREACH v_tick IN ARRAY coalesce(v_ticks, '{}') LOOP
    INSERT INTO :SCHEMA.schedule_runs (schedule, tick) VALUES (s.name, v_tick);
    INSERT INTO :SCHEMA.jobs (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                              concurrency_key, retry)
    VALUES (s.tenant, s.queue, s.task, s.payload, s.priority,
            CASE WHEN v_tick > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
            v_tick, s.max_attempts, s.concurrency_key, s.retry)
    RETURNING id INTO v_id;
    UPDATE :SCHEMA.schedule_runs SET job_id = v_id WHERE schedule = s.name AND tick = v_tick;
    UPDATE :SCHEMA.schedules SET last_job_id = v_id WHERE name = s.name AND last_run_at = v_tick;
  END LOOP;
END $$;

-- Removes a schedule; its ticks enqueued and not started are cancelled.
-- Returns whether it existed.
CREATE OR REPLACE FUNCTION :SCHEMA.remove_schedule(p_name text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM :SCHEMA.schedules WHERE name = p_name;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', n.job_id)), '[]')
    FROM :SCHEMA.schedule_jobs_not_started(p_name) n));
  DELETE FROM :SCHEMA.schedule_runs WHERE schedule = p_name;
  RETURN true;
END $$;

-- Pauses (p_paused) or resumes a schedule; on resume its next tick is p_next (computed
-- from its expression by the caller). NULL if there is no such schedule, else whether it
-- changed. The row lock waits for an upkeep pass firing the schedule, so the ticks that
-- pass enqueued are among those cancelled.
CREATE OR REPLACE FUNCTION :SCHEMA.pause_schedule(p_name text, p_paused boolean, p_next timestamptz)
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
    WITH cancelled AS (
      SELECT c.id FROM :SCHEMA.finish_jobs('cancelled', (
        SELECT coalesce(jsonb_agg(jsonb_build_object('id', n.job_id)), '[]')
        FROM :SCHEMA.schedule_jobs_not_started(p_name) n)) c)
    DELETE FROM :SCHEMA.schedule_runs r USING cancelled c WHERE r.schedule = p_name AND r.job_id = c.id;
  ELSE
    UPDATE :SCHEMA.schedules SET paused_at = NULL, next_run_at = p_next, updated_at = now() WHERE name = p_name;
  END IF;
  RETURN true;
END $$;
