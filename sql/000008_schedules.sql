-- Recurring jobs. Cron expressions are read by the workers (croner); the database keeps
-- each schedule's next tick and guarantees one job per tick: a tick is enqueued only by
-- the transaction that inserts its (schedule, tick) row in schedule_runs, whose primary
-- key refuses a second one, and that moves next_run_at on from the value it read.

CREATE TABLE :SCHEMA.schedules (
  name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
  cron text NOT NULL,                              -- 5 fields, or 6 with seconds first
  tz text NOT NULL DEFAULT 'UTC',                  -- IANA time zone the expression is read in
  task text NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
  payload jsonb NOT NULL DEFAULT 'null',
  tenant text NOT NULL DEFAULT 'default' CHECK (length(tenant) BETWEEN 1 AND 128),
  queue text NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 128),
  priority smallint NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
  concurrency_key text NOT NULL DEFAULT '',
  retry jsonb,
  backfill integer NOT NULL DEFAULT 0 CHECK (backfill >= 0),  -- missed ticks run after downtime
  source text NOT NULL DEFAULT 'api',              -- 'api', or 'crontab' (kept in sync with a file)
  next_run_at timestamptz,                         -- first tick not enqueued yet; NULL: none left
  last_run_at timestamptz,                         -- last tick enqueued
  last_job_id bigint,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON :SCHEMA.schedules (next_run_at);

-- One row per enqueued tick, kept a day: the unique key that makes a tick run once.
CREATE TABLE :SCHEMA.schedule_runs (
  schedule text NOT NULL,
  tick timestamptz NOT NULL,
  job_id bigint,
  PRIMARY KEY (schedule, tick)
);

-- Creates or replaces a schedule (p_schedule: a row of schedules as JSON, next_run_at
-- included). An unchanged expression and time zone keep the next tick they had, so
-- re-applying a schedule at every deploy neither skips nor repeats a tick.
CREATE FUNCTION :SCHEMA.put_schedule(p_schedule jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  s :SCHEMA.schedules := jsonb_populate_record(NULL:::SCHEMA.schedules,
    p_schedule || jsonb_build_object('created_at', now(), 'updated_at', now()));
BEGIN
  s.payload := coalesce(p_schedule -> 'payload', 'null');  -- JSON null is a payload, not NULL
  INSERT INTO :SCHEMA.schedules AS o SELECT s.*
  ON CONFLICT (name) DO UPDATE SET
    cron = excluded.cron, tz = excluded.tz, task = excluded.task, payload = excluded.payload,
    tenant = excluded.tenant, queue = excluded.queue, priority = excluded.priority,
    max_attempts = excluded.max_attempts, concurrency_key = excluded.concurrency_key,
    retry = excluded.retry, backfill = excluded.backfill, source = excluded.source,
    next_run_at = CASE WHEN o.cron = excluded.cron AND o.tz = excluded.tz THEN o.next_run_at
                       ELSE excluded.next_run_at END,
    updated_at = now();
END $$;

-- Removes a schedule; its ticks enqueued ahead that have not started are cancelled.
-- Returns whether it existed.
CREATE FUNCTION :SCHEMA.remove_schedule(p_name text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM :SCHEMA.schedules WHERE name = p_name;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', j.id)), '[]')
    FROM :SCHEMA.schedule_runs r JOIN :SCHEMA.jobs j ON j.id = r.job_id
    WHERE r.schedule = p_name AND j.state = 'scheduled'));
  DELETE FROM :SCHEMA.schedule_runs WHERE schedule = p_name;
  RETURN true;
END $$;

-- Enqueues the ticks p_ticks of schedule p_name (each as a job whose run_at is the tick)
-- and moves its next tick to p_next, if its next tick is still p_expected (another
-- process did it otherwise). A tick already enqueued is skipped. Returns the number of
-- jobs enqueued.
CREATE FUNCTION :SCHEMA.fire_schedule(
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
    INSERT INTO :SCHEMA.schedule_runs (schedule, tick) VALUES (p_name, v_tick) ON CONFLICT DO NOTHING;
    CONTINUE WHEN NOT FOUND;
    INSERT INTO :SCHEMA.jobs (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                              concurrency_key, retry)
    VALUES (s.tenant, s.queue, s.task, s.payload, s.priority,
            CASE WHEN v_tick > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
            v_tick, s.max_attempts, s.concurrency_key, s.retry)
    RETURNING id INTO v_id;
    UPDATE :SCHEMA.schedule_runs SET job_id = v_id WHERE schedule = p_name AND tick = v_tick;
    UPDATE :SCHEMA.schedules SET last_run_at = v_tick, last_job_id = v_id WHERE name = p_name;
    v_n := v_n + 1;
  END LOOP;
  DELETE FROM :SCHEMA.schedule_runs WHERE schedule = p_name AND tick < now() - interval '1 day';
  RETURN v_n;
END $$;
