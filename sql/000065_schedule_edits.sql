-- Editing a schedule redoes its ticks enqueued and not started; pausing or removing one
-- cancels them all, those already due included.
--
-- The upkeep enqueues ticks ahead (a second or so), as jobs holding the schedule's task,
-- payload, tenant, queue... of that moment. put_schedule changed the schedule's row only:
-- after an edit, the ticks already enqueued still ran under the old definition (old
-- payload, old expression's times). Now an edit that changes what a tick enqueues cancels
-- the schedule's tick jobs that have not started (scheduled, or available and never run)
-- and forgets their ticks, then enqueues again under the new definition those whose time
-- has come, and with the same expression and time zone the later ones too; with a new
-- expression the schedule goes on from the new one's next tick. Setting a schedule again
-- unchanged (every start-up does) leaves its jobs alone. pause_schedule and
-- remove_schedule cancelled the ticks still scheduled only: a tick already due, made
-- available and waiting for a worker (a busy queue) still ran after the pause or removal.
-- fire_schedule forgot a tick a day after its time, while its job may still wait (a queue
-- nobody serves): it now keeps the tick while its job, or an earlier tick's, is unfinished,
-- so that such a job is found too. A new expression goes on from the old next tick when its
-- time came before the upkeep fired it (two edits in one upkeep pass lost it). Bodies:
-- the baseline's (part 11) but for that.

-- Cancels the schedule's tick jobs not started and forgets their ticks (so that they can
-- be enqueued again); returns those ticks in order. Not started: scheduled, or available,
-- with no attempt counted and no error recorded. A job handed back unstarted has its
-- attempt refunded and no error; a retry (attempts set to 0) of a run that failed or ended
-- keeps the run's errors, and is not a new tick. The jobs are locked first, so a claim, a
-- run and a nack meanwhile are seen: the row's newest version is checked.
CREATE OR REPLACE FUNCTION :SCHEMA.cancel_ticks_not_started(p_name text)
RETURNS timestamptz[] LANGUAGE sql VOLATILE AS $$
  WITH waiting AS (
    SELECT r.job_id FROM :SCHEMA.schedule_runs r JOIN :SCHEMA.jobs j ON j.id = r.job_id
    WHERE r.schedule = p_name AND j.state IN ('scheduled', 'available') AND j.attempts = 0
      AND j.errors IS NULL
    ORDER BY j.id
    FOR UPDATE OF j
  ),
  cancelled AS (
    SELECT c.id FROM :SCHEMA.finish_jobs('cancelled', (
      SELECT coalesce(jsonb_agg(jsonb_build_object('id', w.job_id)), '[]') FROM waiting w)) c
  ),
  gone AS (
    DELETE FROM :SCHEMA.schedule_runs r USING cancelled c
    WHERE r.schedule = p_name AND r.job_id = c.id RETURNING r.tick
  )
  SELECT array_agg(g.tick ORDER BY g.tick) FROM gone g
$$;

-- Enqueues tick p_tick of schedule s as a job holding its definition, due at the tick,
-- and returns the job's id; NULL if the tick has a job already (the (schedule, tick) key:
-- one job a tick, whoever tries).
CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_tick(s :SCHEMA.schedules, p_tick timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_id bigint;
BEGIN
  INSERT INTO :SCHEMA.schedule_runs (schedule, tick) VALUES (s.name, p_tick) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  INSERT INTO :SCHEMA.jobs (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                            concurrency_key, retry)
  VALUES (s.tenant, s.queue, s.task, s.payload, s.priority,
          CASE WHEN p_tick > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
          p_tick, s.max_attempts, s.concurrency_key, s.retry)
  RETURNING id INTO v_id;
  UPDATE :SCHEMA.schedule_runs SET job_id = v_id WHERE schedule = s.name AND tick = p_tick;
  RETURN v_id;
END $$;

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
  v_same_times boolean;
  v_ticks timestamptz[];
  v_tick timestamptz;
  v_id bigint;
BEGIN
  s.payload := coalesce(p_schedule -> 'payload', 'null');  -- JSON null is a payload, not NULL
  -- the row locked before it is read: an upkeep pass firing it has committed, and its
  -- ticks are among those read below; one made by another session meanwhile (and fired,
  -- perhaps) is edited as such, not taken for new
  LOOP
    SELECT * INTO v_old FROM :SCHEMA.schedules WHERE name = s.name FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO :SCHEMA.schedules SELECT s.* ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
      RETURN;  -- new: nothing enqueued yet
    END IF;
  END LOOP;
  UPDATE :SCHEMA.schedules o SET
    cron = s.cron, tz = s.tz, task = s.task, payload = s.payload, tenant = s.tenant, queue = s.queue,
    priority = s.priority, max_attempts = s.max_attempts, concurrency_key = s.concurrency_key,
    retry = s.retry, backfill = s.backfill, source = s.source,
    next_run_at = CASE WHEN o.cron = s.cron AND o.tz = s.tz THEN o.next_run_at ELSE s.next_run_at END,
    updated_at = now()
  WHERE o.name = s.name
  RETURNING * INTO s;
  IF (v_old.cron, v_old.tz, v_old.task, v_old.payload, v_old.tenant, v_old.queue, v_old.priority,
      v_old.max_attempts, v_old.concurrency_key, v_old.retry)
     IS NOT DISTINCT FROM (s.cron, s.tz, s.task, s.payload, s.tenant, s.queue, s.priority, s.max_attempts,
                           s.concurrency_key, s.retry) THEN
    RETURN;  -- set again unchanged: its jobs stand
  END IF;
  v_same_times := v_old.cron = s.cron AND v_old.tz = s.tz;
  v_ticks := :SCHEMA.cancel_ticks_not_started(s.name);
  IF s.paused_at IS NOT NULL THEN
    RETURN;
  END IF;
  -- a new expression goes on from its first tick after the caller's clock, or from the old
  -- next tick if that time came and the upkeep has not fired it yet (a tick owed): a second
  -- edit before the upkeep must not step over the ticks the first left to it
  IF NOT v_same_times AND v_old.next_run_at <= now() THEN
    UPDATE :SCHEMA.schedules SET next_run_at = least(next_run_at, v_old.next_run_at)
    WHERE name = s.name;
  END IF;
  -- enqueued as fire_schedule does: those whose time came, under the new definition (a new
  -- expression's next tick is later than now), and with the same times the later ones too
  FOREACH v_tick IN ARRAY coalesce(v_ticks, '{}') LOOP
    CONTINUE WHEN NOT v_same_times AND v_tick > now();
    v_id := :SCHEMA.enqueue_tick(s, v_tick);
    UPDATE :SCHEMA.schedules SET last_job_id = v_id WHERE name = s.name AND last_run_at = v_tick;
  END LOOP;
END $$;

-- Fires a schedule's ticks (the upkeep: p_expected the next tick it read, p_ticks those
-- due, p_next the one after). A tick is forgotten a day after its time once its job, and
-- those of the ticks before it, have finished: while a job waits, an edit, a pause or a
-- removal finds it.
CREATE OR REPLACE FUNCTION :SCHEMA.fire_schedule(
  p_name text, p_expected timestamptz, p_ticks timestamptz[], p_next timestamptz
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  s :SCHEMA.schedules;
  v_tick timestamptz;
  v_id bigint;
  v_n integer := 0;
BEGIN
  UPDATE :SCHEMA.schedules SET next_run_at = p_next
  WHERE name = p_name AND next_run_at = p_expected
  RETURNING * INTO s;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  FOREACH v_tick IN ARRAY coalesce(p_ticks, '{}') LOOP
    v_id := :SCHEMA.enqueue_tick(s, v_tick);
    CONTINUE WHEN v_id IS NULL;
    UPDATE :SCHEMA.schedules SET last_run_at = v_tick, last_job_id = v_id WHERE name = p_name;
    v_n := v_n + 1;
  END LOOP;
  -- forgotten from the oldest up to the first whose job is unfinished: a walk as long as
  -- what it forgets, not as the backlog of an unserved queue
  DELETE FROM :SCHEMA.schedule_runs r WHERE r.schedule = p_name AND r.tick < coalesce((
    SELECT o.tick FROM :SCHEMA.schedule_runs o
    WHERE o.schedule = p_name AND o.tick < now() - interval '1 day'
      AND EXISTS (SELECT 1 FROM :SCHEMA.jobs j WHERE j.id = o.job_id)
    ORDER BY o.tick LIMIT 1), now() - interval '1 day');
  RETURN v_n;
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
  PERFORM :SCHEMA.cancel_ticks_not_started(p_name);
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
    PERFORM :SCHEMA.cancel_ticks_not_started(p_name);
  ELSE
    UPDATE :SCHEMA.schedules SET paused_at = NULL, next_run_at = p_next, updated_at = now() WHERE name = p_name;
  END IF;
  RETURN true;
END $$;
