-- Task definitions shared through the database. A worker records the definitions of the
-- tasks it runs when it starts; producers that do not load the task list (another
-- service's library instance, `tusk enqueue`, `POST /api/jobs`, the SQL enqueue) apply
-- them: the default tenant and queue, the attempts of the retry policy, and the payload's
-- JSON Schema (checked by the library, hence the CLI and the HTTP API). One row a task:
-- the worker that started last wrote it.

CREATE TABLE :SCHEMA.task_definitions (
  task           text PRIMARY KEY,
  tenant         text,         -- default tenant of its jobs (null: 'default')
  queue          text,         -- default queue of its jobs (null: 'default')
  max_attempts   integer,      -- retry.maxAttempts (null: the enqueue's default, 5)
  backoff        jsonb,        -- retry.backoff: "exponential", milliseconds, or "function"
  retry_queue    text,         -- retry.queue: the queue of its retries
  timeout_ms     integer,      -- time limit of an attempt (null: none)
  isolated       boolean NOT NULL DEFAULT false,
  -- JSON Schema (draft 2020-12) of the payload as the producer sends it, or null; a
  -- validator that exports none leaves a null here and schema_missing says why
  payload_schema jsonb,
  schema_missing text,
  recorded_by    text NOT NULL,  -- the worker's name
  recorded_at    timestamptz NOT NULL DEFAULT now()
);

-- The SQL enqueue applies a recorded definition's tenant, queue and attempts to the options
-- it was not given (the checked entry of 000015 is kept as enqueue_entry_options; callers
-- resolve enqueue_entry by name when they run). The payload's JSON Schema is not checked
-- here: PostgreSQL has no JSON Schema validator; the worker checks the payload before the
-- handler runs and ends a job whose payload its schema refuses.
ALTER FUNCTION :SCHEMA.enqueue_entry(jsonb, jsonb, jsonb, text, boolean) RENAME TO enqueue_entry_options;

CREATE FUNCTION :SCHEMA.enqueue_entry(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
RETURNS jsonb LANGUAGE sql AS $$
  SELECT coalesce(jsonb_strip_nulls(jsonb_build_object(
           'tenant', d.tenant, 'queue', d.queue, 'max_attempts', d.max_attempts)), '{}') || e.entry
  FROM (SELECT :SCHEMA.enqueue_entry_options(p_task, p_payload, p_options, p_at, p_entry) AS entry) e
  LEFT JOIN :SCHEMA.task_definitions d ON d.task = e.entry ->> 'task'
$$;
