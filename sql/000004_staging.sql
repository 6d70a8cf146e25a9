-- Tusk schema, version 4: transactionally-staged jobs.
--
-- stage() writes here inside the caller's transaction; one drainer per schema (a session
-- advisory lock) forwards rows in id order to a sink (Tusk's own jobs table, BullMQ, ...)
-- and deletes them once the sink has them. Rows only ever leave through the drainer.

CREATE TABLE :SCHEMA.staged_jobs (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task text NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
  payload jsonb NOT NULL DEFAULT 'null',
  -- the job's options as enqueue's JSON entry (tenant, queue, priority, run_at, ...);
  -- a delay is turned into run_at when staged, so it counts from the commit's clock
  options jsonb NOT NULL DEFAULT '{}',
  staged_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION :SCHEMA.notify_staged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(:SCHEMA_LITERAL || ':staged', '');
  RETURN NULL;
END $$;

CREATE TRIGGER staged_jobs_notify AFTER INSERT ON :SCHEMA.staged_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.notify_staged();

-- Worker ids are the positive keys under hashtext(schema); the migration (-1) and
-- maintenance (0) locks share that space and must not be read as workers (-1 read as an
-- integer overflowed while a migration ran).
CREATE OR REPLACE FUNCTION :SCHEMA.live_worker_ids()
RETURNS integer[] LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(l.objid::bigint::integer), '{}')
  FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.classid = hashtext(:SCHEMA_LITERAL)::oid
    AND l.objid::bigint BETWEEN 1 AND 2147483647
$$;
