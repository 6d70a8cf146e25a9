-- Tusk schema, version 30: the baseline.
--
-- Every object of the schema, once, in its final form, grouped by part. The development
-- history before 0.1 (schema versions 1 to 30) is squashed into this one file: a new schema
-- runs it and is recorded at version 30. A schema that a development build left at a
-- version from 1 to 29 is refused (src/migrate/migrate.ts says what to do). Changes after
-- it are migrations of their own, numbered from 000031; sql/schema.sql is the dump of the
-- schema they all leave, where the live definition of every object is.
--
-- :SCHEMA is replaced by the quoted schema name, :SCHEMA_LITERAL by it as a string literal.
--
-- Parts:
--    1. Types
--    2. Tables and indexes
--    3. Tenants: slots, per-key limits, rate limits
--    4. Enqueue: from the library and from SQL, deduplicated, debounced
--    5. Claim: the bookkeeping that a pinned xmin horizon cannot slow down, and claim_jobs
--    6. Finish, requeue, cancel, retry, delete, progress
--    7. Flows: jobs that wait for other jobs
--    8. Leases: the queue as SQL for consumers in any language
--    9. Workers
--   10. Upkeep
--   11. Schedules
--   12. History: partitions and retention
--   13. Paused queues, staged jobs
--   14. API tokens and roles
--
-- Layout (see docs/operations.md, "How it works"):
--   jobs          unfinished jobs only (scheduled, available, running, failed-will-retry): small and hot
--   job_history   finished jobs (succeeded, dead, cancelled, expired), partitioned by finish day
--   tenants       per-tenant slots, concurrency-key limit, rate limit, pause; a claim locks
--                 the rows of the limited tenants it serves (see claim_jobs)
--   workers       live worker processes; each holds a session advisory lock so that a
--                 dead process is seen at once (its lock vanishes with its connection)
--   lane_marks, active_pairs, pair_scans, tenant_serves, running_*
--                 the claim's bookkeeping, appended to and pruned by the upkeep (part 5)
--   job_deps      the edges of flows still to be settled (part 7)
--   staged_jobs   jobs staged in a caller's transaction, forwarded by the drainer
--   schedules     recurring jobs, and schedule_runs, the ticks enqueued
--   api_tokens    tokens of the HTTP API
--
-- Three functions carry their design notes as COMMENT ON (claim_jobs, finish_jobs,
-- maintain), for sql/schema.sql and \df+. The numbers in parentheses in those notes name
-- the schema versions whose migrations argued each point before they were squashed here;
-- the arguments themselves are the comments of this file.


-- =======================================================================================
-- 1. Types
-- =======================================================================================

CREATE TYPE :SCHEMA.job_state AS ENUM (
  'scheduled', 'available', 'running', 'failed', 'succeeded', 'dead', 'cancelled', 'expired'
);

-- A lane: a (queue, tenant, concurrency key) the claim reads in (priority, id) order; a
-- NULL key stands for the (queue, tenant) pair across its keys.
CREATE TYPE :SCHEMA.lane AS (queue text, tenant text, concurrency_key text);


-- =======================================================================================
-- 2. Tables and indexes
-- =======================================================================================

-- Settings, one row.
CREATE TABLE :SCHEMA.config (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  -- slots for tenants that have none of their own; NULL means unlimited
  default_slots integer CHECK (default_slots > 0),
  -- how long finished jobs are kept (part 12); NULL: forever. Stored, not passed by each
  -- process: whichever worker holds the history upkeep's lock applies the same policy.
  retention interval CHECK (retention > interval '0'),
  -- at most this many concurrency keys of a (queue, tenant) pair are read by one claim,
  -- for a tenant with a per-key limit (see claim_jobs)
  key_lanes integer NOT NULL DEFAULT 1000 CHECK (key_lanes > 0)
);
INSERT INTO :SCHEMA.config DEFAULT VALUES;

CREATE TABLE :SCHEMA.tenants (
  tenant text PRIMARY KEY CHECK (length(tenant) BETWEEN 1 AND 128),
  slots integer CHECK (slots > 0),                 -- NULL: config.default_slots
  per_key integer CHECK (per_key > 0),             -- max running jobs per concurrency key
  paused boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  retention interval CHECK (retention > interval '0'),  -- NULL: config's
  -- at most rate_limit job starts (claims) per window of rate_per_ms (see part 3)
  rate_limit integer CHECK (rate_limit > 0),
  rate_per_ms bigint CHECK (rate_per_ms > 0),
  rate_window bigint NOT NULL DEFAULT 0,           -- the window rate_used counts in
  rate_used integer NOT NULL DEFAULT 0,            -- starts in that window
  CONSTRAINT tenants_rate CHECK ((rate_limit IS NULL) = (rate_per_ms IS NULL))
);
-- Rate-limited tenants, for the workers' wake-up at the next window.
CREATE INDEX tenants_rated ON :SCHEMA.tenants (tenant) WHERE rate_limit IS NOT NULL;

CREATE TABLE :SCHEMA.workers (
  id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name text NOT NULL,
  host text NOT NULL,
  pid integer NOT NULL,
  queues text[],                                  -- NULL: all queues
  concurrency integer NOT NULL,
  version text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE :SCHEMA.jobs (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  tenant text NOT NULL DEFAULT 'default' CHECK (length(tenant) BETWEEN 1 AND 128),
  queue text NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 128),
  task text NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
  payload jsonb NOT NULL DEFAULT 'null',
  priority smallint NOT NULL DEFAULT 0,            -- lower runs first
  state :SCHEMA.job_state NOT NULL DEFAULT 'available'
    CHECK (state IN ('scheduled', 'available', 'running', 'failed')),
  run_at timestamptz NOT NULL DEFAULT now(),       -- when it may start (or retry)
  attempts integer NOT NULL DEFAULT 0,             -- claims so far
  max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
  concurrency_key text NOT NULL DEFAULT '',        -- '' means none
  dedup_key text,
  expires_at timestamptz,
  retry jsonb,                                     -- {"backoff": "exponential" | ms, "queue": "..."}
  locked_by integer,                               -- workers.id, NULL for external leases
  lease_until timestamptz,
  cancel_requested boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  errors jsonb,                                    -- one entry per failed attempt
  stats jsonb,
  -- The record the job is about: set by `tusk.async(instance).method(...)` and by the
  -- `source` option of enqueue. Kept on the job through its life and in history, indexed
  -- for "every job of report 42".
  source_type text,
  source_id text,
  source_method text,
  lease_token bigint,                              -- the running lease's token (lease_tokens, below)
  debounce_key text,                               -- see jobs_debounce
  debounce_until timestamptz,                      -- a debounced job starts by then at the latest
  -- what its handler reported of how far it got (ctx.progress): a number or a small JSON
  -- value, written by the worker at most once a heartbeat; it goes to history with the job
  progress jsonb,
  -- the transaction that made it available: set at insert and by the jobs_available_again
  -- trigger (part 5), for the claim's read of arrivals
  avail_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  -- flows (part 7): the jobs it depends on, in order (also in history, for
  -- ctx.dependencies()); how many of them have not ended; what their failure does to it
  depends_on bigint[],
  waiting_on integer NOT NULL DEFAULT 0,
  on_dependency_failure text                       -- 'cancel' (NULL: the default) or 'continue'
) WITH (fillfactor = 90);  -- room for HOT lease extensions

-- These three are NOT VALID, as the development history added them to a table that held
-- rows (sparing a scan under its lock); the baseline keeps them so, so that every schema
-- at version 30 has the same catalog. The flag only says that no scan has checked the
-- rows there were: PostgreSQL checks every row inserted or updated against them all the
-- same. The second is what keeps a waiting job out of every claim: only a scheduled job
-- waits.
ALTER TABLE :SCHEMA.jobs
  ADD CONSTRAINT jobs_source_check CHECK (
    (source_type IS NULL AND source_id IS NULL AND source_method IS NULL)
    OR (length(source_type) BETWEEN 1 AND 128 AND length(source_id) BETWEEN 1 AND 256
        AND coalesce(length(source_method) BETWEEN 1 AND 128, true))) NOT VALID,
  ADD CONSTRAINT jobs_waiting_check CHECK (waiting_on >= 0 AND (waiting_on = 0 OR state = 'scheduled')) NOT VALID,
  ADD CONSTRAINT jobs_on_dependency_failure_check
    CHECK (on_dependency_failure IN ('cancel', 'continue')) NOT VALID;

-- The claim reads a (queue, tenant) pair's available jobs in (priority, id) order, across
-- its concurrency keys...
CREATE INDEX jobs_ready_pair ON :SCHEMA.jobs (queue, tenant, priority, id) WHERE state = 'available';
-- ...and, for a tenant with a per-key limit, each key's lane in that order (key_lanes
-- finds the keys on it, one index descent each).
CREATE INDEX jobs_ready ON :SCHEMA.jobs (queue, tenant, concurrency_key, priority, id)
  WHERE state = 'available';
-- Promotion of due scheduled jobs and due retries. Jobs waiting for their dependencies
-- are left out: a promotion or a look for the next due time never walks them, however
-- many wait.
CREATE INDEX jobs_due ON :SCHEMA.jobs (run_at)
  WHERE state IN ('scheduled', 'failed') AND waiting_on = 0;
-- Running jobs per tenant and key: the reaper scans them.
CREATE INDEX jobs_running ON :SCHEMA.jobs (tenant, concurrency_key) WHERE state = 'running';
CREATE INDEX jobs_expiring ON :SCHEMA.jobs (expires_at)
  WHERE expires_at IS NOT NULL AND state <> 'running';
CREATE UNIQUE INDEX jobs_dedup ON :SCHEMA.jobs (tenant, dedup_key) WHERE dedup_key IS NOT NULL;
-- Debounce: a burst of enqueues with one key, while its job has not started, makes one
-- job with the last payload, starting delayMs after the last enqueue — and no later than
-- maxWaitMs after the first, so a steady stream still runs. The key's job is the one in
-- state `scheduled` (this partial unique index decides, race-free); once due it is
-- promoted, leaves the index, and the next enqueue starts a new burst.
CREATE UNIQUE INDEX jobs_debounce ON :SCHEMA.jobs (tenant, debounce_key)
  WHERE debounce_key IS NOT NULL AND state = 'scheduled';
-- Partial: jobs without a source cost nothing here.
CREATE INDEX jobs_source ON :SCHEMA.jobs (source_type, source_id) WHERE source_type IS NOT NULL;
-- The arrivals (part 5). `avail_xid IS NOT NULL` (always true) keeps the planner from
-- taking this small index for any query that asks only for available jobs: only a
-- condition on avail_xid proves it.
CREATE INDEX jobs_arrivals ON :SCHEMA.jobs (avail_xid) WHERE state = 'available' AND avail_xid IS NOT NULL;

-- A lease is (job id, token). The token is drawn from this sequence at every claim: never
-- handed out twice, not after retry() (which resets the attempt count), not after a claim
-- whose transaction rolled back (a sequence does not roll back). ack, nack, extension,
-- the worker's batched outcomes and its heartbeat all check it.
CREATE SEQUENCE :SCHEMA.lease_tokens;

-- The dependencies of flows that still matter (part 7): (dependency, dependent) for each
-- dependency that had not ended when the dependent was enqueued.
CREATE TABLE :SCHEMA.job_deps (
  dependency bigint NOT NULL,
  dependent bigint NOT NULL,
  PRIMARY KEY (dependency, dependent)
);

CREATE TABLE :SCHEMA.job_history (
  id bigint NOT NULL,
  tenant text NOT NULL,
  queue text NOT NULL,
  task text NOT NULL,
  payload jsonb NOT NULL,
  priority smallint NOT NULL,
  state :SCHEMA.job_state NOT NULL CHECK (state IN ('succeeded', 'dead', 'cancelled', 'expired')),
  attempts integer NOT NULL,
  max_attempts integer NOT NULL,
  concurrency_key text NOT NULL,
  dedup_key text,
  created_at timestamptz NOT NULL,
  run_at timestamptz NOT NULL,
  started_at timestamptz,
  finished_at timestamptz NOT NULL,
  expires_at timestamptz,
  wait_ms integer,                                 -- run_at (or created_at) to last start
  run_ms integer,                                  -- last attempt's run time
  result jsonb,
  errors jsonb,
  stats jsonb,
  source_type text,
  source_id text,
  source_method text,
  retry jsonb,                                     -- a retried job keeps its own retry policy
  progress jsonb,
  depends_on bigint[],
  on_dependency_failure text
) PARTITION BY RANGE (finished_at);

CREATE INDEX job_history_id ON :SCHEMA.job_history (id);
CREATE INDEX job_history_tenant ON :SCHEMA.job_history (tenant, finished_at DESC);
CREATE INDEX job_history_source ON :SCHEMA.job_history (source_type, source_id, finished_at DESC)
  WHERE source_type IS NOT NULL;
-- Metrics and the dashboard's charts read the history of the last minutes or hour. Rows
-- arrive in finish order, so a BRIN index skips the older part of a day's partition for
-- almost nothing on the write path (a B-tree would add an index entry to every finish).
CREATE INDEX job_history_finished ON :SCHEMA.job_history USING brin (finished_at)
  WITH (pages_per_range = 32, autosummarize = on);
-- Catches rows whose day partition does not exist yet (the upkeep creates them ahead, and
-- moves such rows out when it creates their day's: see create_history_partition).
CREATE TABLE :SCHEMA.job_history_default PARTITION OF :SCHEMA.job_history DEFAULT;

-- Transactionally-staged jobs. stage() writes here inside the caller's transaction; one
-- drainer per schema (a session advisory lock) forwards rows in id order to a sink (Tusk's
-- own jobs table, BullMQ, ...) and deletes them once the sink has them. Rows only ever
-- leave through the drainer.
CREATE TABLE :SCHEMA.staged_jobs (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  task text NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
  payload jsonb NOT NULL DEFAULT 'null',
  -- the job's options as enqueue's JSON entry (tenant, queue, priority, run_at, ...);
  -- a delay is turned into run_at when staged, so it counts from the commit's clock
  options jsonb NOT NULL DEFAULT '{}',
  staged_at timestamptz NOT NULL DEFAULT now()
);

-- The drainer's takeover guard.
--
-- One drainer is active: the one holding the drain lock, a session advisory lock on its
-- own connection. When that connection is lost (the backend terminated, the server
-- restarted, the network cut) the lock goes at once, but a send already handed to the
-- sink goes on in the drainer's process, out of the database's reach: neither a session
-- lock nor a lock taken per batch can stop it. Only time bounds it. So before each send
-- to a sink outside the database, the active drainer records here, by the database's
-- clock, when it will have given that send up (its send timeout), and clears it once the
-- batch is deleted; a drainer that takes the lock waits until then, and a margin, before
-- it sends. A clean stop, or a sink writing in the drainer's own transaction (whose writes
-- go with the connection), leaves nothing to wait for.
CREATE TABLE :SCHEMA.drainer_lease (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  busy_until timestamptz  -- NULL: no send to an outside sink can still be running
);
INSERT INTO :SCHEMA.drainer_lease DEFAULT VALUES;

-- Recurring jobs (part 11).
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
  updated_at timestamptz NOT NULL DEFAULT now(),
  paused_at timestamptz                            -- NULL: not paused (see pause_schedule)
);
CREATE INDEX schedules_due ON :SCHEMA.schedules (next_run_at);

-- One row per enqueued tick, kept a day: the unique key that makes a tick run once.
CREATE TABLE :SCHEMA.schedule_runs (
  schedule text NOT NULL,
  tick timestamptz NOT NULL,
  job_id bigint,
  PRIMARY KEY (schedule, tick)
);

-- Tokens of the HTTP API (tusk serve).
--
-- A token is shown once, when created; only its SHA-256 is kept (tokens are 32 random
-- bytes, so a plain hash is enough: there is nothing to brute-force). A token without a
-- tenant is an admin token; one with a tenant sees and acts on that tenant's jobs only.
--
-- Its scopes say what it may do, on top of whose jobs it sees (its tenant's, or with no
-- tenant every tenant's). A tenant token that may only enqueue and read its jobs cannot
-- lease or complete them; a worker's token may lease but not enqueue.
--   enqueue, read, manage (cancel, retry), lease (fetch, ack, nack, extend): any token;
--   metrics, admin: tokens without a tenant only (they reach every tenant).
CREATE TABLE :SCHEMA.api_tokens (
  id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  name text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
  tenant text CHECK (length(tenant) BETWEEN 1 AND 128),   -- NULL: admin
  token_hash bytea NOT NULL UNIQUE,
  prefix text NOT NULL,                                   -- its first characters, to tell tokens apart
  created_at timestamptz NOT NULL DEFAULT now(),
  last_used_at timestamptz,                               -- to the minute
  revoked_at timestamptz,
  scopes text[] NOT NULL,
  CONSTRAINT api_tokens_scopes_known
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['enqueue', 'read', 'manage', 'lease', 'metrics', 'admin']),
  CONSTRAINT api_tokens_scopes_of_tenant
    CHECK (tenant IS NULL OR NOT scopes && ARRAY['metrics', 'admin'])
);

-- Pausing a queue (part 13): claims that start after pause_queue() committed take none of
-- its jobs (running ones go on); enqueues still land in it.
CREATE TABLE :SCHEMA.paused_queues (
  queue text PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
  paused_at timestamptz NOT NULL DEFAULT now()
);

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

-- The claim's bookkeeping (part 5 says what each piece is for and why).

-- 1. Lane marks: where the claims of a (queue, tenant) lane have got to.
CREATE TABLE :SCHEMA.lane_marks (
  seq bigint GENERATED ALWAYS AS IDENTITY,
  queue text NOT NULL,
  tenant text NOT NULL,
  priority smallint NOT NULL,
  id bigint NOT NULL,
  snap pg_snapshot NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  -- false: written by the upkeep to renew an idle lane's snapshot, not by a claim
  claimed boolean NOT NULL DEFAULT true,
  PRIMARY KEY (seq)
);
CREATE INDEX lane_marks_newest ON :SCHEMA.lane_marks (queue, tenant, seq DESC);

-- 2. Active pairs: the (queue, tenant) pairs that may have work, and the looks at the
--    arrivals that added them (one snapshot each).
CREATE TABLE :SCHEMA.active_pairs (
  queue text NOT NULL,
  tenant text NOT NULL,
  PRIMARY KEY (queue, tenant)
);
CREATE TABLE :SCHEMA.pair_scans (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  snap pg_snapshot NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);
-- the first look: every job committed after it is an arrival that the first claim takes up
INSERT INTO :SCHEMA.pair_scans (snap) VALUES (pg_current_snapshot());

-- 3. Serves: when each tenant was served, for the round-robin order.
CREATE TABLE :SCHEMA.tenant_serves (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant text NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tenant_serves_newest ON :SCHEMA.tenant_serves (tenant, at DESC);

-- 4. Running counts, per tenant (ckey '') and per tenant and concurrency key: the base,
--    the deltas appended since, and how far the base has folded them in.
CREATE TABLE :SCHEMA.running_base (
  tenant text NOT NULL,
  ckey text NOT NULL,
  n integer NOT NULL,
  PRIMARY KEY (tenant, ckey)
);
CREATE TABLE :SCHEMA.running_deltas (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant text NOT NULL,
  ckey text NOT NULL,
  n integer NOT NULL
);
CREATE INDEX running_deltas_lane ON :SCHEMA.running_deltas (tenant, ckey, seq) INCLUDE (n);
-- the deltas at or before `upto` are in running_base
CREATE TABLE :SCHEMA.running_fold (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  upto bigint NOT NULL
);
INSERT INTO :SCHEMA.running_fold (upto) VALUES (0);

-- Where the previous pruning of marks, serves and looks stopped in each table.
CREATE TABLE :SCHEMA.lane_prune (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  marks bigint NOT NULL DEFAULT 0,
  serves bigint NOT NULL DEFAULT 0,
  scans bigint NOT NULL DEFAULT 0,
  passes bigint NOT NULL DEFAULT 0
);
INSERT INTO :SCHEMA.lane_prune DEFAULT VALUES;


-- =======================================================================================
-- 3. Tenants: slots, per-key limits, rate limits
-- =======================================================================================
--
-- Tenant slots are exact without a counter that completions keep: a tenant's running jobs
-- are counted by the claim itself, in a statement that starts after the claim has locked
-- the tenant's row. Claims for one tenant are serialized by that lock, and the fresh
-- snapshot sees every claim that committed before it, so the count is exact (a completion
-- still in flight only makes it conservative). Nothing else makes jobs running, so nothing
-- else touches tenant rows: completions never contend with claims, and there is no
-- counter to drift. (The count itself is read from running_base and running_deltas, part
-- 5, which every statement moving jobs into or out of 'running' appends to.)
--
-- Rate limits: at most rate_limit job starts (claims) per window of rate_per_ms, across
-- all workers, composing with slots. Windows are aligned on the epoch (window k is
-- [k * per, (k + 1) * per) ms), so every process agrees on them. A rate-limited tenant is
-- claimed like a tenant with slots: under its row lock, which serializes its claims, and
-- its starts are counted on its row in the same transaction (rate_window, rate_used):
-- exact, with no counter shared with other tenants. A tenant out of starts is filtered out
-- before any lock is taken, so it holds back no one. Tenants without a rate limit take
-- the same paths as tenants did before rate limits existed (measured back to back with
-- that claim_jobs on the shared 2-core machine: fairness --quick 1.14 -> 1.22 ms a claim
-- at A=1 000, scaling --quick 7.4/7.1 -> 7.2/7.7 ms, drain 26-28k -> 28-31k jobs/s: noise).

-- Advisory lock keys: (tenant_lock_space, hashtext(tenant)) per tenant, and
-- (tenant_lock_space, 0) for the default slots. Claims of unlimited tenants hold them
-- shared; a change of limits holds them exclusively, so it waits for those claims.
CREATE FUNCTION :SCHEMA.tenant_lock_space() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(:SCHEMA_LITERAL || ':tenants') $$;

-- Changes a tenant's settings (NULL leaves a setting as it is; p_reset_* sets it to
-- NULL). Waits for claims in flight that treat the tenant as unlimited.
CREATE FUNCTION :SCHEMA.set_tenant(
  p_tenant text, p_slots integer, p_reset_slots boolean, p_per_key integer,
  p_reset_per_key boolean, p_paused boolean
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), hashtext(p_tenant));
  INSERT INTO :SCHEMA.tenants AS t (tenant, slots, per_key, paused)
  VALUES (p_tenant, p_slots, p_per_key, coalesce(p_paused, false))
  ON CONFLICT (tenant) DO UPDATE SET
    slots = CASE WHEN p_reset_slots THEN NULL ELSE coalesce(p_slots, t.slots) END,
    per_key = CASE WHEN p_reset_per_key THEN NULL ELSE coalesce(p_per_key, t.per_key) END,
    paused = coalesce(p_paused, t.paused);
  -- wakes idle workers: a resume or more slots are used at once
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

-- Sets the slots of tenants without their own; waits for claims in flight that rely on it.
CREATE FUNCTION :SCHEMA.set_default_slots(p_slots integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), 0);
  UPDATE :SCHEMA.config SET default_slots = p_slots;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

-- The window that time p_at falls in, for windows of p_per_ms.
CREATE FUNCTION :SCHEMA.rate_window(p_per_ms bigint, p_at timestamptz)
RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT floor(extract(epoch FROM p_at) * 1000 / p_per_ms)::bigint
$$;

-- Starts a tenant has left in the window of p_at; a large number without a rate limit.
CREATE FUNCTION :SCHEMA.rate_left(p_tenant :SCHEMA.tenants, p_at timestamptz)
RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN p_tenant.rate_limit IS NULL THEN 2147483647
    WHEN p_tenant.rate_window >= :SCHEMA.rate_window(p_tenant.rate_per_ms, p_at)
      THEN greatest(0, p_tenant.rate_limit - p_tenant.rate_used)
    ELSE p_tenant.rate_limit
  END
$$;

-- Sets (or with p_limit NULL removes) a tenant's rate limit. Waits for claims in flight
-- that treat the tenant as unlimited, like set_tenant.
CREATE FUNCTION :SCHEMA.set_tenant_rate(p_tenant text, p_limit integer, p_per_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), hashtext(p_tenant));
  INSERT INTO :SCHEMA.tenants AS t (tenant, rate_limit, rate_per_ms)
  VALUES (p_tenant, p_limit, CASE WHEN p_limit IS NULL THEN NULL ELSE p_per_ms END)
  ON CONFLICT (tenant) DO UPDATE SET rate_limit = excluded.rate_limit, rate_per_ms = excluded.rate_per_ms;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;


-- =======================================================================================
-- 4. Enqueue
-- =======================================================================================
--
-- The library inserts into jobs itself (src/queries/insertJobs.ts, copyJobs.ts), one
-- statement per call; a call with dedup or debounce keys goes through enqueue_dedup, one
-- with dependencies through enqueue_flow (part 7). Tenants seen for the first time get
-- their row from the claim, not here, so an enqueue never takes a lock that a caller's
-- transaction would hold.

-- One wake-up per enqueue statement, not per job: idle workers claim on it.
CREATE FUNCTION :SCHEMA.notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify AFTER INSERT ON :SCHEMA.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.notify_jobs();

-- Enqueues jobs of which some carry a dedup key or a debounce key. p_jobs: the insert
-- statement's array; entries may add `dedup_key` and `dedup_window_ms`, or `debounce_key`
-- and `debounce_max_wait_ms`. Returns one row per entry, in input order.
--
-- Dedup: a job whose key matches an unfinished job of the same tenant enqueued within its
-- window is not added; the existing job's id is returned instead (deduplicated = true).
-- Race-free: the unique index on (tenant, dedup_key) decides, not a read before the write
-- (a concurrent enqueue of the same key waits for the first to commit, then finds its
-- job). An unfinished job older than the window gives its key up first, so a new job can
-- take it. The keys are locked before any insert, all in one order, so that two calls
-- with the same keys in opposite orders cannot deadlock.
--
-- Debounce (jobs_debounce, part 2): while the key's job has not started, an enqueue
-- replaces its payload and options and moves its start to the new run_at, but never past
-- the deadline that the burst's first enqueue set (debounce_until); deduplicated = true
-- when an enqueue updated the key's job rather than making one.
--
-- SECURITY DEFINER (part 14): a producer need not UPDATE jobs (an expired key is given up
-- here).
CREATE FUNCTION :SCHEMA.enqueue_dedup(p_jobs jsonb)
RETURNS TABLE (ord bigint, id bigint, deduplicated boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  e record;
  v_id bigint;
  v_run_at timestamptz;
  v_try integer;
  k record;
BEGIN
  -- The keys are locked first, all in one order: two calls with the same keys in
  -- opposite orders would otherwise each wait for the other's entry in the unique index.
  FOR k IN
    SELECT DISTINCT hashtext(coalesce(x.tenant, 'default') || E'\x1f' || coalesce(x.dedup_key, E'\x1e' || x.debounce_key)) AS h
    FROM jsonb_to_recordset(p_jobs) AS x(tenant text, dedup_key text, debounce_key text)
    WHERE x.dedup_key IS NOT NULL OR x.debounce_key IS NOT NULL
    ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':dedup'), k.h);
  END LOOP;
  FOR e IN
    SELECT x.*, coalesce(x.tenant, 'default') AS tenant_name
    FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
           task text, payload jsonb, tenant text, queue text, priority smallint, run_at timestamptz,
           delay_ms bigint, max_attempts integer, concurrency_key text, expires_at timestamptz,
           retry jsonb, dedup_key text, dedup_window_ms bigint, source_type text, source_id text,
           source_method text, debounce_key text, debounce_max_wait_ms bigint)) WITH ORDINALITY
         AS x(task, payload, tenant, queue, priority, run_at, delay_ms, max_attempts,
              concurrency_key, expires_at, retry, dedup_key, dedup_window_ms, source_type, source_id,
              source_method, debounce_key, debounce_max_wait_ms, n)
    ORDER BY x.n
  LOOP
    v_run_at := coalesce(e.run_at, now() + coalesce(e.delay_ms, 0) * interval '1 millisecond');
    IF e.debounce_key IS NOT NULL THEN
      -- debounced: while the key's job has not started, this enqueue replaces its payload and
      -- options and moves its start to v_run_at — but never past its first enqueue's deadline
      INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, debounce_key, debounce_until,
                                     source_type, source_id, source_method)
      VALUES (e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
              coalesce(e.priority, 0), 'scheduled', v_run_at, coalesce(e.max_attempts, 5),
              coalesce(e.concurrency_key, ''), e.expires_at, e.retry, e.debounce_key,
              now() + e.debounce_max_wait_ms * interval '1 millisecond',
              e.source_type, e.source_id, e.source_method)
      ON CONFLICT (tenant, debounce_key) WHERE debounce_key IS NOT NULL AND state = 'scheduled'
      DO UPDATE SET task = excluded.task, payload = excluded.payload, queue = excluded.queue,
        priority = excluded.priority, max_attempts = excluded.max_attempts,
        concurrency_key = excluded.concurrency_key, expires_at = excluded.expires_at, retry = excluded.retry,
        source_type = excluded.source_type, source_id = excluded.source_id, source_method = excluded.source_method,
        run_at = least(excluded.run_at, coalesce(j.debounce_until, 'infinity'))
      RETURNING j.id, j.xmax <> 0 INTO v_id, deduplicated;
      ord := e.n; id := v_id;
      RETURN NEXT;
      CONTINUE;
    END IF;
    -- a few tries at most: the matching job may finish before its id is read
    FOR v_try IN 1..5 LOOP
      IF e.dedup_key IS NOT NULL THEN
        UPDATE :SCHEMA.jobs j SET dedup_key = NULL
        WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key
          AND j.created_at < now() - coalesce(e.dedup_window_ms, 600000) * interval '1 millisecond';
      END IF;
      INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                     concurrency_key, expires_at, retry, dedup_key,
                                     source_type, source_id, source_method)
      VALUES (e.tenant_name, coalesce(e.queue, 'default'), e.task, coalesce(e.payload, 'null'),
              coalesce(e.priority, 0),
              CASE WHEN v_run_at > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
              v_run_at, coalesce(e.max_attempts, 5), coalesce(e.concurrency_key, ''), e.expires_at,
              e.retry, e.dedup_key, e.source_type, e.source_id, e.source_method)
      ON CONFLICT (tenant, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
      RETURNING j.id INTO v_id;
      IF v_id IS NOT NULL THEN
        ord := e.n; id := v_id; deduplicated := false;
        RETURN NEXT;
        EXIT;
      END IF;
      SELECT j.id INTO v_id FROM :SCHEMA.jobs j WHERE j.tenant = e.tenant_name AND j.dedup_key = e.dedup_key;
      IF v_id IS NOT NULL THEN
        ord := e.n; id := v_id; deduplicated := true;
        RETURN NEXT;
        EXIT;
      END IF;
      IF v_try = 5 THEN
        RAISE EXCEPTION 'tusk: could not enqueue job % with dedup key %: matching jobs kept finishing', e.n, e.dedup_key;
      END IF;
    END LOOP;
  END LOOP;
END $$;

-- Enqueue from SQL: triggers, migrations and programs in any language add jobs with the
-- options of the library's enqueue (camelCase keys, same names, meanings and bounds), and
-- write what it writes:
--   SELECT tusk.enqueue_job('send_welcome', '{"user_id": 42}', '{"queue": "mail", "delayMs": 5000}');
--   SELECT * FROM tusk.enqueue_jobs('[{"task": "a"}, {"task": "b", "payload": [1], "priority": -1}]');
-- A bad argument raises SQLSTATE 22023 (invalid_parameter_value) with a message naming the
-- field (`tusk: options.maxAttempts must be an integer from 1 to 1000 (got 0)`), and
-- nothing is written. Times (runAt, expiresAt) are ISO 8601 strings with a time zone, as
-- to_jsonb(timestamptz) writes them. The options take dependsOn (ids, as numbers or
-- strings of digits) and onDependencyFailure too: such entries go through enqueue_flow.
-- The task definitions that workers recorded (task_definitions) give the tenant, queue and
-- attempts of the options not given (enqueue_entry); the payload's JSON Schema is not
-- checked here: PostgreSQL has no JSON Schema validator, and the worker checks the payload
-- before the handler runs and ends a job whose payload its schema refuses.

-- Raises the error of a bad argument.
CREATE FUNCTION :SCHEMA.arg_refuse(p_field text, p_message text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', MESSAGE = 'tusk: ' || p_field || ' ' || p_message;
END $$;

-- A bad value, shortly, for error messages (SQL NULL is NULL, JSON null is null).
CREATE FUNCTION :SCHEMA.arg_describe(v jsonb)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN v IS NULL THEN 'NULL'
    WHEN jsonb_typeof(v) = 'string' AND length(v #>> '{}') > 40 THEN 'a string of ' || length(v #>> '{}') || ' characters'
    WHEN jsonb_typeof(v) = 'array' THEN 'an array'
    WHEN jsonb_typeof(v) = 'object' THEN 'an object'
    ELSE v::text END
$$;

-- Edit distance (insertions, deletions, substitutions) of two short strings.
CREATE FUNCTION :SCHEMA.arg_edit_distance(a text, b text)
RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  prev integer[];
  cur integer[];
BEGIN
  prev := ARRAY(SELECT generate_series(0, length(b)));
  FOR i IN 1..length(a) LOOP
    cur := ARRAY[i];
    FOR j IN 1..length(b) LOOP
      cur := cur || least(prev[j + 1] + 1, cur[j] + 1,
                          prev[j] + CASE WHEN substr(a, i, 1) = substr(b, j, 1) THEN 0 ELSE 1 END);
    END LOOP;
    prev := cur;
  END LOOP;
  RETURN prev[length(b) + 1];
END $$;

-- The known option an unknown one is likely a typo of (a prefix either way, or at most
-- 2 edits away), or NULL: as the library suggests.
CREATE FUNCTION :SCHEMA.arg_closest(p_key text, p_known text[])
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text := lower(p_key);
  c text;
  candidate text;
  best text;
  best_distance integer := 3;
  distance integer;
BEGIN
  FOREACH candidate IN ARRAY p_known LOOP
    c := lower(candidate);
    IF (length(k) >= 3 AND starts_with(c, k)) OR (length(c) >= 3 AND starts_with(k, c)) THEN
      distance := 1;
    ELSE
      distance := :SCHEMA.arg_edit_distance(k, c);
    END IF;
    IF distance < best_distance THEN
      best := candidate;
      best_distance := distance;
    END IF;
  END LOOP;
  RETURN best;
END $$;

-- Refuses an object (options, retry, source) that is not one or has keys not in p_known.
CREATE FUNCTION :SCHEMA.arg_object(v jsonb, p_field text, p_known text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_unknown text[];
  v_guess text;
BEGIN
  IF jsonb_typeof(v) IS DISTINCT FROM 'object' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be an object (got ' || :SCHEMA.arg_describe(v) || ')');
  END IF;
  SELECT array_agg(k) INTO v_unknown FROM jsonb_object_keys(v) k WHERE k <> ALL (p_known);
  IF v_unknown IS NULL THEN RETURN; END IF;
  IF cardinality(v_unknown) = 1 THEN
    v_guess := :SCHEMA.arg_closest(v_unknown[1], p_known);
    PERFORM :SCHEMA.arg_refuse(p_field, 'has an unknown option ' || to_jsonb(v_unknown[1])::text
      || coalesce(' (did you mean ' || to_jsonb(v_guess)::text || '?)', ''));
  END IF;
  PERFORM :SCHEMA.arg_refuse(p_field, 'has unknown options '
    || (SELECT string_agg(to_jsonb(u)::text, ', ') FROM unnest(v_unknown) u));
END $$;

-- A name (p_name: task, queue, tenant...: no control characters, as they are shown in
-- logs and tables) or a key (concurrency or dedup key: any text), of 1 to p_max
-- characters. NUL cannot reach here: neither text nor jsonb holds it.
CREATE FUNCTION :SCHEMA.arg_text(v jsonb, p_field text, p_max integer, p_name boolean)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  s text;
BEGIN
  IF jsonb_typeof(v) IS DISTINCT FROM 'string' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be a string (got ' || :SCHEMA.arg_describe(v) || ')');
  END IF;
  s := v #>> '{}';
  IF s = '' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must not be empty');
  ELSIF length(s) > p_max THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be at most ' || p_max || ' characters');
  ELSIF p_name AND s ~ '[\u0001-\u001f\u007f-\u009f]' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must not contain control characters (U+0000-U+001F, U+007F-U+009F; got '
      || :SCHEMA.arg_describe(v) || ')');
  END IF;
  RETURN s;
END $$;

-- An integer from p_min to p_max (1.0 and 1e3 are integers, as in JavaScript).
CREATE FUNCTION :SCHEMA.arg_integer(v jsonb, p_field text, p_min bigint, p_max bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  n numeric;
BEGIN
  IF jsonb_typeof(v) IS DISTINCT FROM 'number' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be a number (got ' || :SCHEMA.arg_describe(v) || ')');
  END IF;
  n := v::numeric;
  IF n <> trunc(n) OR n < p_min OR n > p_max THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be an integer from ' || p_min || ' to ' || p_max || ' (got ' || v::text || ')');
  END IF;
  RETURN n::bigint;
END $$;

-- A time: an ISO 8601 date-time string with a time zone (what to_jsonb(timestamptz)
-- writes), in years 1 to 9999 UTC as the library takes Dates.
CREATE FUNCTION :SCHEMA.arg_time(v jsonb, p_field text)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
  t timestamptz;
BEGIN
  IF jsonb_typeof(v) = 'string'
     AND (v #>> '{}') ~ '^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d(:\d\d)?)$' THEN
    BEGIN
      t := (v #>> '{}')::timestamptz;
    EXCEPTION WHEN data_exception THEN
      t := NULL;  -- month 13, February 30...
    END;
  END IF;
  IF t IS NULL THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be an ISO 8601 date-time with a time zone, e.g. 2030-01-01T09:00:00Z (got '
      || :SCHEMA.arg_describe(v) || ')');
  ELSIF t < '0001-01-01T00:00:00Z' OR t >= '10000-01-01T00:00:00Z' THEN
    PERFORM :SCHEMA.arg_refuse(p_field, 'must be in the years 1 to 9999 UTC (got ' || :SCHEMA.arg_describe(v) || ')');
  END IF;
  RETURN t;
END $$;

-- One job, checked as the library's enqueue checks it, as the entry the insert statements
-- read (the library's: snake_case, options not given left out). p_at names the options in
-- errors: 'options' for enqueue_job; for an entry of enqueue_jobs ('jobs[3]'), p_options
-- is the whole entry and its task and payload are named under it. dependsOn and
-- onDependencyFailure become `depends_on`, `deps_at` (the field, for errors) and
-- `on_dependency_failure`, as enqueue_flow reads them.
CREATE FUNCTION :SCHEMA.enqueue_entry_options(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  -- the library's longest delay: 100 years of 365.25 days, in ms
  c_max_delay constant bigint := 3155760000000;
  -- the library's default payload limit (its option maxPayloadBytes), and deepest nesting
  c_max_payload constant integer := 1048576;
  c_max_depth constant integer := 1000;
  o jsonb := coalesce(p_options, '{}');
  v_task_at text := CASE WHEN p_entry THEN p_at || '.task' ELSE 'task' END;
  v_payload_at text := CASE WHEN p_entry THEN p_at || '.payload' ELSE 'payload' END;
  v_payload jsonb := coalesce(p_payload, 'null');
  v_bytes integer;
  r jsonb;
  v_retry jsonb;
  v_backoff jsonb;
  v_retry_attempts bigint;
  v_source jsonb;
  v_id jsonb;
  v_deps jsonb;
  v_bad record;
BEGIN
  PERFORM :SCHEMA.arg_object(o, p_at, ARRAY['tenant', 'queue', 'priority', 'runAt', 'delayMs', 'maxAttempts',
    'expiresAt', 'concurrencyKey', 'dedupe', 'dedupKey', 'dedupWindowMs', 'source', 'retry', 'dependsOn',
    'onDependencyFailure']
    || CASE WHEN p_entry THEN ARRAY['task', 'payload'] ELSE '{}'::text[] END);
  IF p_task IS NULL THEN
    PERFORM :SCHEMA.arg_refuse(v_task_at, 'is required (a string of 1 to 200 characters)');
  END IF;
  r := jsonb_build_object('task', :SCHEMA.arg_text(p_task, v_task_at, 200, true));

  IF o ? 'tenant' THEN
    r := r || jsonb_build_object('tenant', :SCHEMA.arg_text(o -> 'tenant', p_at || '.tenant', 128, true));
  END IF;
  IF o ? 'queue' THEN
    r := r || jsonb_build_object('queue', :SCHEMA.arg_text(o -> 'queue', p_at || '.queue', 128, true));
  END IF;
  IF o ? 'priority' THEN
    r := r || jsonb_build_object('priority', :SCHEMA.arg_integer(o -> 'priority', p_at || '.priority', -32768, 32767));
  END IF;
  IF o ? 'runAt' THEN
    r := r || jsonb_build_object('run_at', :SCHEMA.arg_time(o -> 'runAt', p_at || '.runAt'));
  END IF;
  IF o ? 'delayMs' THEN
    r := r || jsonb_build_object('delay_ms', :SCHEMA.arg_integer(o -> 'delayMs', p_at || '.delayMs', 0, c_max_delay));
  END IF;
  IF o ? 'maxAttempts' THEN
    r := r || jsonb_build_object('max_attempts', :SCHEMA.arg_integer(o -> 'maxAttempts', p_at || '.maxAttempts', 1, 1000));
  END IF;
  IF o ? 'expiresAt' THEN
    r := r || jsonb_build_object('expires_at', :SCHEMA.arg_time(o -> 'expiresAt', p_at || '.expiresAt'));
  END IF;
  IF o ? 'concurrencyKey' THEN
    r := r || jsonb_build_object('concurrency_key',
      :SCHEMA.arg_text(o -> 'concurrencyKey', p_at || '.concurrencyKey', 256, false));
  END IF;
  IF o ? 'dedupe' AND jsonb_typeof(o -> 'dedupe') <> 'boolean' THEN
    PERFORM :SCHEMA.arg_refuse(p_at || '.dedupe', 'must be true or false (got ' || :SCHEMA.arg_describe(o -> 'dedupe') || ')');
  END IF;
  IF o ? 'dedupKey' THEN
    r := r || jsonb_build_object('dedup_key', :SCHEMA.arg_text(o -> 'dedupKey', p_at || '.dedupKey', 512, false));
  ELSIF o -> 'dedupe' = 'true' THEN
    -- the library hashes the payload as JavaScript writes it (its numbers, its key order),
    -- which SQL cannot reproduce for every payload: a key that would not match its own
    PERFORM :SCHEMA.arg_refuse(p_at || '.dedupe', 'is not available in SQL (the key it derives hashes the payload as '
      || 'JavaScript writes it): give dedupKey, e.g. ''{"dedupKey": "welcome:42"}''');
  END IF;
  IF o ? 'dedupWindowMs' THEN
    r := r || jsonb_build_object('dedup_window_ms',
      :SCHEMA.arg_integer(o -> 'dedupWindowMs', p_at || '.dedupWindowMs', 0, c_max_delay));
  END IF;

  IF o ? 'dependsOn' THEN
    v_deps := o -> 'dependsOn';
    IF jsonb_typeof(v_deps) IS DISTINCT FROM 'array' THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.dependsOn', 'must be an array of job ids (got ' || :SCHEMA.arg_describe(v_deps) || ')');
    ELSIF jsonb_array_length(v_deps) > 10000 THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.dependsOn', 'must list at most 10000 jobs');
    END IF;
    -- a positive integer in bigint's range: a JSON number, or a string of digits (as the library writes ids)
    SELECT a.k, a.v INTO v_bad FROM jsonb_array_elements(v_deps) WITH ORDINALITY AS a(v, k)
    WHERE NOT CASE
      WHEN jsonb_typeof(a.v) = 'number' THEN a.v::numeric = trunc(a.v::numeric) AND a.v::numeric BETWEEN 1 AND 9223372036854775807
      WHEN jsonb_typeof(a.v) = 'string' THEN (a.v #>> '{}') ~ '^[1-9][0-9]{0,18}$' AND (a.v #>> '{}')::numeric <= 9223372036854775807
      ELSE false END
    ORDER BY a.k LIMIT 1;
    IF FOUND THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.dependsOn[' || (v_bad.k - 1) || ']',
        'must be a job id: a positive integer (got ' || :SCHEMA.arg_describe(v_bad.v) || ')');
    END IF;
    IF jsonb_array_length(v_deps) > 0 THEN
      IF o ? 'dedupKey' THEN
        PERFORM :SCHEMA.arg_refuse(p_at, 'has dependsOn and dedupKey: a job with dependencies is not deduplicated');
      END IF;
      r := r || jsonb_build_object('deps_at', p_at || '.dependsOn', 'depends_on',
        (SELECT jsonb_agg(to_jsonb((a.v #>> '{}')::numeric::bigint) ORDER BY a.k)
         FROM jsonb_array_elements(v_deps) WITH ORDINALITY AS a(v, k)));
    END IF;
  END IF;
  IF o ? 'onDependencyFailure' THEN
    IF NOT o ? 'dependsOn' THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.onDependencyFailure', 'is for a job with dependencies: give dependsOn too');
    ELSIF (o -> 'onDependencyFailure') NOT IN ('"cancel"', '"continue"') THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.onDependencyFailure', 'must be ''cancel'' or ''continue'' (got '
        || :SCHEMA.arg_describe(o -> 'onDependencyFailure') || ')');
    END IF;
    r := r || jsonb_build_object('on_dependency_failure', o ->> 'onDependencyFailure');
  END IF;

  IF o ? 'source' THEN
    v_source := o -> 'source';
    PERFORM :SCHEMA.arg_object(v_source, p_at || '.source', ARRAY['type', 'id', 'method']);
    IF NOT v_source ? 'type' THEN
      PERFORM :SCHEMA.arg_refuse(p_at || '.source.type', 'is required (a string of 1 to 128 characters)');
    END IF;
    r := r || jsonb_build_object('source_type', :SCHEMA.arg_text(v_source -> 'type', p_at || '.source.type', 128, true));
    v_id := v_source -> 'id';
    IF jsonb_typeof(v_id) = 'number' AND v_id::numeric = trunc(v_id::numeric)
       AND abs(v_id::numeric) <= 9007199254740991 THEN  -- a safe integer, written as JavaScript writes it
      r := r || jsonb_build_object('source_id', v_id::numeric::bigint::text);
    ELSIF jsonb_typeof(v_id) = 'string' AND length(v_id #>> '{}') BETWEEN 1 AND 256 THEN
      r := r || jsonb_build_object('source_id', v_id #>> '{}');
    ELSE
      PERFORM :SCHEMA.arg_refuse(p_at || '.source.id', 'must be a string of 1 to 256 characters or an integer (got '
        || :SCHEMA.arg_describe(v_id) || ')');
    END IF;
    IF v_source ? 'method' THEN
      r := r || jsonb_build_object('source_method',
        :SCHEMA.arg_text(v_source -> 'method', p_at || '.source.method', 128, true));
    END IF;
  END IF;

  IF o ? 'retry' THEN
    v_retry := o -> 'retry';
    PERFORM :SCHEMA.arg_object(v_retry, p_at || '.retry', ARRAY['maxAttempts', 'backoff', 'queue']);
    IF v_retry ? 'maxAttempts' THEN
      v_retry_attempts := :SCHEMA.arg_integer(v_retry -> 'maxAttempts', p_at || '.retry.maxAttempts', 1, 1000);
    END IF;
    IF v_retry ? 'backoff' THEN
      v_backoff := v_retry -> 'backoff';
      IF v_backoff = '"exponential"' THEN
        NULL;
      ELSIF jsonb_typeof(v_backoff) = 'number' AND v_backoff::numeric = trunc(v_backoff::numeric)
            AND v_backoff::numeric BETWEEN 0 AND c_max_delay THEN
        v_backoff := to_jsonb(v_backoff::numeric::bigint);  -- 1000.0 is stored 1000, as the library stores it
      ELSE
        PERFORM :SCHEMA.arg_refuse(p_at || '.retry.backoff', 'must be ''exponential'' or an integer number of milliseconds from 0 to '
          || c_max_delay || ' (got ' || :SCHEMA.arg_describe(v_backoff) || ')');
      END IF;
    END IF;
    -- the job's retry column holds backoff and queue; attempts go to max_attempts
    IF v_retry ? 'backoff' OR v_retry ? 'queue' THEN
      r := r || jsonb_build_object('retry', jsonb_strip_nulls(jsonb_build_object('backoff', v_backoff,
        'queue', CASE WHEN v_retry ? 'queue' THEN :SCHEMA.arg_text(v_retry -> 'queue', p_at || '.retry.queue', 128, true) END)));
    END IF;
    IF v_retry_attempts IS NOT NULL AND NOT r ? 'max_attempts' THEN
      r := r || jsonb_build_object('max_attempts', v_retry_attempts);
    END IF;
  END IF;

  IF o ? 'runAt' AND o ? 'delayMs' THEN
    PERFORM :SCHEMA.arg_refuse(p_at, 'must give runAt or delayMs, not both');
  END IF;

  -- counted as PostgreSQL writes the jsonb as text (a space after each colon and comma)
  v_bytes := octet_length(v_payload::text);
  IF v_bytes > c_max_payload THEN
    PERFORM :SCHEMA.arg_refuse(v_payload_at, 'is ' || v_bytes || ' bytes as JSON, over the limit of ' || c_max_payload);
  END IF;
  -- deeper than c_max_depth: an array or object at that level (needs 2 brackets a level)
  IF v_bytes > 2 * c_max_depth
     AND jsonb_path_exists(v_payload, 'strict $.**{1000} ? (@.type() == "array" || @.type() == "object")') THEN
    PERFORM :SCHEMA.arg_refuse(v_payload_at, 'must not be nested deeper than ' || c_max_depth || ' levels');
  END IF;
  RETURN r || jsonb_build_object('payload', v_payload);
END $$;

-- The checked entry, with a recorded task definition's tenant, queue and attempts applied
-- to the options it was not given.
CREATE FUNCTION :SCHEMA.enqueue_entry(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
RETURNS jsonb LANGUAGE sql AS $$
  SELECT coalesce(jsonb_strip_nulls(jsonb_build_object(
           'tenant', d.tenant, 'queue', d.queue, 'max_attempts', d.max_attempts)), '{}') || e.entry
  FROM (SELECT :SCHEMA.enqueue_entry_options(p_task, p_payload, p_options, p_at, p_entry) AS entry) e
  LEFT JOIN :SCHEMA.task_definitions d ON d.task = e.entry ->> 'task'
$$;

-- Writes checked entries as the library does: through enqueue_flow when any has
-- dependencies (not with deduplicated ones in the same call), through enqueue_dedup when
-- any has a dedup key, else in one INSERT (one NOTIFY, by the jobs_notify trigger, sent at
-- commit). Returns each entry's job id and whether it matched an existing job, in input
-- order.
CREATE FUNCTION :SCHEMA.enqueue_entries(p_entries jsonb)
RETURNS TABLE (id bigint, deduplicated boolean) LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_entries) e WHERE e ? 'depends_on') THEN
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_entries) e WHERE e ? 'dedup_key') THEN
      PERFORM :SCHEMA.arg_refuse('jobs', 'has jobs with dependencies (dependsOn) and deduplicated jobs (dedupKey): '
        || 'enqueue them in separate calls');
    END IF;
    RETURN QUERY SELECT f.id, false FROM :SCHEMA.enqueue_flow(p_entries) WITH ORDINALITY AS f(id, n) ORDER BY f.n;
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_entries) e WHERE e ? 'dedup_key') THEN
    RETURN QUERY SELECT d.id, d.deduplicated FROM :SCHEMA.enqueue_dedup(p_entries) d ORDER BY d.ord;
    RETURN;
  END IF;
  -- rows are inserted in array order and identity values drawn in insert order, so the
  -- sorted ids are in input order
  RETURN QUERY
  WITH ins AS (
    INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                   concurrency_key, expires_at, retry, source_type, source_id, source_method)
    SELECT coalesce(x.tenant, 'default'), coalesce(x.queue, 'default'), x.task,
           coalesce(x.payload, 'null'), coalesce(x.priority, 0),
           CASE WHEN r.run_at > now() THEN 'scheduled' ELSE 'available' END:::SCHEMA.job_state,
           r.run_at, coalesce(x.max_attempts, 5), coalesce(x.concurrency_key, ''), x.expires_at, x.retry,
           x.source_type, x.source_id, x.source_method
    FROM jsonb_to_recordset(p_entries) AS x(
           task text, payload jsonb, tenant text, queue text, priority smallint,
           run_at timestamptz, delay_ms bigint, max_attempts integer, concurrency_key text,
           expires_at timestamptz, retry jsonb, source_type text, source_id text, source_method text)
    CROSS JOIN LATERAL (
      SELECT coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond') AS run_at) r
    RETURNING j.id)
  SELECT ins.id, false FROM ins ORDER BY ins.id;
END $$;

-- Adds a job; returns its id (for a deduplicated enqueue, the existing job's). Inside the
-- caller's transaction, a trigger's included: the job exists only if it commits.
-- SECURITY DEFINER (part 14): a producer calls this, its INSERT privilege being for the
-- library's own path.
CREATE FUNCTION :SCHEMA.enqueue_job(p_task text, p_payload jsonb DEFAULT 'null', p_options jsonb DEFAULT '{}')
RETURNS bigint LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
BEGIN
  SELECT e.id INTO v_id FROM :SCHEMA.enqueue_entries(jsonb_build_array(
    :SCHEMA.enqueue_entry(to_jsonb(p_task), p_payload, p_options, 'options', false))) e;
  RETURN v_id;
END $$;

-- Adds many jobs, each `{task, payload, ...options}`, in one statement (with a dedup key
-- anywhere, a statement per entry). Returns, in input order, each job's id and whether it
-- matched an existing job. Errors name the entry (`jobs[3].queue`); then none is written.
-- SECURITY DEFINER, as enqueue_job.
CREATE FUNCTION :SCHEMA.enqueue_jobs(p_jobs jsonb)
RETURNS TABLE (id bigint, deduplicated boolean) LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_entries jsonb[] := '{}';
  v_job jsonb;
  v_n bigint;
  v_at text;
BEGIN
  IF jsonb_typeof(p_jobs) IS DISTINCT FROM 'array' THEN
    PERFORM :SCHEMA.arg_refuse('jobs', 'must be an array (got ' || :SCHEMA.arg_describe(p_jobs) || ')');
  END IF;
  FOR v_job, v_n IN SELECT x.value, x.n FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS x(value, n) ORDER BY x.n LOOP
    v_at := 'jobs[' || (v_n - 1) || ']';
    IF jsonb_typeof(v_job) <> 'object' THEN
      PERFORM :SCHEMA.arg_refuse(v_at, 'must be an object (got ' || :SCHEMA.arg_describe(v_job) || ')');
    END IF;
    v_entries := array_append(v_entries, :SCHEMA.enqueue_entry(v_job -> 'task', v_job -> 'payload', v_job, v_at, true));
  END LOOP;
  IF cardinality(v_entries) = 0 THEN RETURN; END IF;
  RETURN QUERY SELECT e.id, e.deduplicated FROM :SCHEMA.enqueue_entries(to_jsonb(v_entries)) e;
END $$;


-- =======================================================================================
-- 5. Claim
-- =======================================================================================
--
-- Claims that a pinned xmin horizon cannot slow down.
--
-- Every production PostgreSQL has long transactions (an idle session, an analytics query,
-- a replication slot). While one is open, no row version deleted or updated after it began
-- can be removed from the heap or from any index. A claim that reads a lane from its start
-- then walks the dead index entries of every job claimed since — measured (`npm run bench
-- -- pinned`): one claim 4 ms before the pin, 68 ms after 100 000 jobs; with slot limits,
-- whose running jobs were counted on an index of the same kind, 114 ms.
--
-- The rule: no statement of the claim reads an index range that the claim itself keeps
-- killing. Four pieces, each append-only on the hot path, and plans told so (see
-- "Planned per call", part 6, and lane_mark, pairs_with_work, arrivals_since below):
--
-- 1. Lane marks. After a claim took jobs of a (queue, tenant) lane, in (priority, id)
--    order, it appends a mark: a position, and a snapshot in which no job of the lane at
--    or before the position is available (taken after its own update, so that the jobs
--    it claimed count as gone).
--    The next claim reads the lane from the position on, so its index scan starts among
--    live entries, plus the "arrivals": jobs made available by a transaction the mark's
--    snapshot did not see (jobs.avail_xid, written at insert and by a trigger whenever a
--    job becomes available again), which may sit before the position (a job committed
--    late, a retry, a promoted delayed job). Those are found by avail_xid, not by position:
--    `avail_xid >= xmax(snapshot) OR avail_xid IN xip(snapshot)`, as PgQ reads events
--    between ticks, in one read for all the lanes of a claim. The new position is the
--    furthest job the claim took before the first job still available after the old one,
--    so a job skipped — locked by a parallel claim that may yet roll back, committed
--    late — is never passed; and no mark is written while an arrival before the old
--    position is still available. Marks are read newest first; older ones go in the
--    upkeep, behind the newest, where no read goes.
--    The upkeep also renews a lane's mark that is over a second old (same position, its
--    own snapshot) when nothing arrived at or before the position since, so that no idle
--    or full lane pulls every reader's read of arrivals back to its old snapshot.
-- 2. Active pairs. Walking the ready index to find the (queue, tenant) pairs with work
--    would start at its dead front. Instead a claim looks up the pairs in active_pairs
--    plus the pairs of the arrivals since the previous look (pair_scans: one snapshot
--    each); one claim at a time (a try-lock) adds those pairs and records its snapshot as
--    the next look. The upkeep removes pairs with nothing available and no claim for a
--    minute, under the same lock, so an arrival it did not see is seen by the next look.
-- 3. Serves. Round-robin order kept on the tenant rows (a last-served time updated by
--    every claim) would grow, under a pinned horizon, a chain of row versions as long as
--    the claims made. Instead a claim appends to tenant_serves and the order reads each
--    tenant's newest entry (an index descent).
-- 4. Running counts. Counted on jobs_running, a limited tenant's running jobs would be
--    read through its dead entries (finished jobs), which grow without bound. Instead
--    every statement that moves jobs into or out of 'running' appends the change to
--    running_deltas (a statement trigger, so no path can forget it); a count is
--    running_base plus the deltas after the last fold. The upkeep folds the deltas into
--    the base about twice a second, holding an advisory lock that writers take shared, so
--    the deltas it folds are all the committed ones. Exact as before: claims of a limited
--    tenant are serialized by its row lock.
--
-- What still walks dead entries under a pinned horizon: the key lanes of tenants with a
-- per-key limit (found and read as before, at most config.key_lanes keys a claim), the
-- rate-limited tenants' rows (their window is counted in the row), the upkeep's search
-- for running jobs whose lease ran out (every pass, off the claim path), and the arrivals
-- read (the jobs enqueued since the oldest mark a claim holds, about a second's worth).
--
-- No sequential scan in three of the claim's helpers (SET enable_seqscan = off: lane_mark,
-- arrivals_since, pairs_with_work). Each reads an index range that starts among live
-- entries; but a plan made from statistics can prefer a sequential scan (an EXISTS over a
-- lane with a backlog "finds a row at once"; a small table of marks), and under a pinned
-- horizon the heap's first pages hold nothing but dead rows — measured in the pressure
-- run's pinned phase: pairs_with_work 0.8–1.7 s a call, on a seq scan of `jobs` that read
-- 82 000 pages; lane_mark 6 ms on a seq scan of lane_marks. (Not on the small helpers
-- that PostgreSQL inlines into the claim: a SET clause stops the inlining, and planning
-- them on every call cost more than it saved.)

-- 1. Lane marks

CREATE FUNCTION :SCHEMA.jobs_available_again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.avail_xid := pg_current_xact_id();
  RETURN NEW;
END $$;
-- A job that becomes available, or moves to another lane or place while available, is an
-- arrival of the transaction doing it.
CREATE TRIGGER jobs_available_again BEFORE UPDATE ON :SCHEMA.jobs FOR EACH ROW
WHEN (NEW.state = 'available' AND (OLD.state <> 'available' OR OLD.queue <> NEW.queue
      OR OLD.tenant <> NEW.tenant OR OLD.priority <> NEW.priority))
EXECUTE FUNCTION :SCHEMA.jobs_available_again();

-- Where a claim starts reading a (queue, tenant) lane: after (priority, id), plus the
-- arrivals the mark's snapshot did not see (avail_xid >= xmax or in xip). No mark: the
-- lane from its start, no arrivals. A mark from the future (a database restored into
-- another cluster, whose transaction ids start lower) is no mark: its arrivals rule would
-- miss jobs.
CREATE FUNCTION :SCHEMA.lane_mark(
  p_queue text, p_tenant text,
  OUT priority smallint, OUT id bigint, OUT xmax xid8, OUT xip xid8[], OUT at timestamptz,
  OUT snap pg_snapshot
) LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
  SELECT coalesce(m.priority, -32768), coalesce(m.id, 0), pg_snapshot_xmax(m.snap),
         coalesce(ARRAY(SELECT pg_snapshot_xip(m.snap)), '{}'), m.at, m.snap
  FROM (SELECT) one LEFT JOIN LATERAL (
    SELECT m.priority, m.id, m.snap, m.at FROM :SCHEMA.lane_marks m
    WHERE m.queue = p_queue AND m.tenant = p_tenant ORDER BY m.seq DESC LIMIT 1
  ) m ON pg_snapshot_xmax(m.snap) <= pg_snapshot_xmax(pg_current_snapshot())
$$;

-- The jobs made available by a transaction a snapshot did not see, in every lane: read
-- on jobs_arrivals alone (its SET clause keeps it from being inlined, so no condition on
-- the lane is pushed in and no plan reads a lane from its dead front instead). Readers
-- pass the oldest xmax and all the xips of the marks they hold and filter per mark.
-- No seq scan: after ANALYZE has seen a flood of jobs just enqueued, "enqueued since"
-- looks like most of the table, and a seq scan of `jobs` (20 ms with 150 000 jobs
-- waiting, three times a claim) replaced a range read that finds none.
CREATE FUNCTION :SCHEMA.arrivals_since(p_xmax xid8, p_xip xid8[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
  -- two ranges, not an OR: each is an index condition whatever the estimates
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state = 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid >= p_xmax
  UNION ALL
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state = 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid = ANY (p_xip)
    AND (p_xmax IS NULL OR j.avail_xid < p_xmax)
$$;

-- 2. Active pairs

-- The lock of the look at arrivals (and of the upkeep's removal of idle pairs).
CREATE FUNCTION :SCHEMA.arrivals_lock() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(':SCHEMA' || ':arrivals') $$;

-- The pairs of the jobs that arrived since the previous look.
CREATE FUNCTION :SCHEMA.arrived_pairs() RETURNS TABLE (queue text, tenant text)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT a.queue, a.tenant
  FROM (SELECT s.snap FROM :SCHEMA.pair_scans s ORDER BY s.seq DESC LIMIT 1) prev
  CROSS JOIN LATERAL :SCHEMA.arrivals_since(
    pg_snapshot_xmax(prev.snap), ARRAY(SELECT pg_snapshot_xip(prev.snap))) a
$$;

-- Adds them to the active pairs; one statement, so the snapshot recorded is the one the
-- arrivals were read under. The caller holds the lock.
CREATE FUNCTION :SCHEMA.take_up_arrivals() RETURNS void LANGUAGE sql AS $$
  WITH added AS (
    INSERT INTO :SCHEMA.active_pairs (queue, tenant)
    SELECT a.queue, a.tenant FROM :SCHEMA.arrived_pairs() a
    ON CONFLICT DO NOTHING
  )
  INSERT INTO :SCHEMA.pair_scans (snap) VALUES (pg_current_snapshot())
$$;

-- Pairs with an available job: after their mark (an index range that starts among live
-- entries), or among the arrivals their mark did not see (one read for all of them).
CREATE FUNCTION :SCHEMA.pairs_with_work(p_pairs :SCHEMA.lane[]) RETURNS :SCHEMA.lane[]
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $$
  WITH pairs AS MATERIALIZED (
    SELECT p.queue, p.tenant, m.priority, m.id, m.xmax, m.xip
    FROM unnest(p_pairs) p CROSS JOIN LATERAL :SCHEMA.lane_mark(p.queue, p.tenant) m
  ),
  arr AS MATERIALIZED (
    SELECT a.queue, a.tenant, a.avail_xid FROM :SCHEMA.arrivals_since(
      (SELECT min(p.xmax) FROM pairs p), ARRAY(SELECT DISTINCT x FROM pairs p, unnest(p.xip) x)) a
  )
  SELECT array_agg(ROW(p.queue, p.tenant, NULL):::SCHEMA.lane) FROM pairs p
  WHERE EXISTS (SELECT 1 FROM :SCHEMA.jobs j
                WHERE j.state = 'available' AND j.queue = p.queue AND j.tenant = p.tenant
                  AND (j.priority, j.id) > (p.priority, p.id))
     OR EXISTS (SELECT 1 FROM arr a
                WHERE a.queue = p.queue AND a.tenant = p.tenant
                  AND (a.avail_xid >= p.xmax OR a.avail_xid = ANY (p.xip)))
$$;

-- The (queue, tenant) pairs with available jobs, as lanes with no key. Paused queues
-- (part 13) are left out.
CREATE FUNCTION :SCHEMA.ready_pairs(p_queues text[], p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql AS $$
DECLARE
  v_took boolean := pg_try_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
BEGIN
  IF v_took THEN
    PERFORM :SCHEMA.take_up_arrivals();
  END IF;
  -- Without the lock (another claim or the upkeep holds it), the arrivals are read all the
  -- same: a job committed before this claim began is always seen by it.
  RETURN :SCHEMA.pairs_with_work(ARRAY(
    SELECT ROW(a.queue, a.tenant, NULL):::SCHEMA.lane FROM (
      SELECT p.queue, p.tenant FROM :SCHEMA.active_pairs p
      UNION
      SELECT n.queue, n.tenant FROM :SCHEMA.arrived_pairs() n WHERE NOT v_took
    ) a
    WHERE (p_queues IS NULL OR a.queue = ANY (p_queues))
      AND (p_tenant IS NULL OR a.tenant = p_tenant)
      AND NOT EXISTS (SELECT 1 FROM :SCHEMA.paused_queues p WHERE p.queue = a.queue)));
END $$;

-- The keys with available jobs of one (queue, tenant) pair, as lanes: the first
-- config.key_lanes of them in key order, one index descent each (on jobs_ready).
CREATE FUNCTION :SCHEMA.key_lanes(p_queue text, p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE sql STABLE AS $$
  WITH RECURSIVE k AS (
    (SELECT j.concurrency_key FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = p_queue AND j.tenant = p_tenant
      ORDER BY j.concurrency_key LIMIT 1)
    UNION ALL
    SELECT n.concurrency_key FROM k CROSS JOIN LATERAL (
      SELECT j.concurrency_key FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = p_queue AND j.tenant = p_tenant
        AND j.concurrency_key > k.concurrency_key
      ORDER BY j.concurrency_key LIMIT 1) n
  )
  SELECT array_agg(ROW(p_queue, p_tenant, k.concurrency_key):::SCHEMA.lane)
  FROM (SELECT * FROM k LIMIT (SELECT c.key_lanes FROM :SCHEMA.config c)) k
$$;

-- 3. Serves

-- When a tenant was last served ('-infinity': never).
CREATE FUNCTION :SCHEMA.served_at(p_tenant text) RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT s.at FROM :SCHEMA.tenant_serves s WHERE s.tenant = p_tenant ORDER BY s.at DESC LIMIT 1),
    '-infinity')
$$;

-- 4. Running counts

CREATE FUNCTION :SCHEMA.running_lock() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(':SCHEMA' || ':running') $$;

-- Running jobs of a tenant (p_key '') or of one of its concurrency keys.
CREATE FUNCTION :SCHEMA.running_now(p_tenant text, p_key text) RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT b.n FROM :SCHEMA.running_base b WHERE b.tenant = p_tenant AND b.ckey = p_key), 0)
       + coalesce((SELECT sum(d.n)::integer FROM :SCHEMA.running_deltas d
                   WHERE d.tenant = p_tenant AND d.ckey = p_key
                     AND d.seq > (SELECT f.upto FROM :SCHEMA.running_fold f)), 0)
$$;

-- Statement triggers: the change of running jobs per tenant and key, one row each.
CREATE FUNCTION :SCHEMA.count_running() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_tenants text[];
  v_keys text[];
  v_ns integer[];
BEGIN
  -- the rows that left 'running' (-1) and entered it (+1); new_rows only in an UPDATE
  IF TG_OP = 'UPDATE' THEN
    SELECT array_agg(m.tenant), array_agg(m.concurrency_key), array_agg(m.n) INTO v_tenants, v_keys, v_ns
    FROM (SELECT o.tenant, o.concurrency_key, -1 AS n FROM old_rows o WHERE o.state = 'running'
          UNION ALL
          SELECT w.tenant, w.concurrency_key, 1 FROM new_rows w WHERE w.state = 'running') m;
  ELSE
    SELECT array_agg(o.tenant), array_agg(o.concurrency_key), array_agg(-1) INTO v_tenants, v_keys, v_ns
    FROM old_rows o WHERE o.state = 'running';
  END IF;
  IF v_tenants IS NULL THEN RETURN NULL; END IF;
  -- per tenant ('') and per concurrency key; a lease renewed (-1 +1) writes nothing
  SELECT array_agg(d.tenant), array_agg(d.ckey), array_agg(d.n) INTO v_tenants, v_keys, v_ns FROM (
    SELECT m.tenant, k.ckey, sum(m.n)::integer AS n
    FROM unnest(v_tenants, v_keys, v_ns) m(tenant, concurrency_key, n)
    CROSS JOIN LATERAL (VALUES (''), (nullif(m.concurrency_key, ''))) k(ckey)
    WHERE k.ckey IS NOT NULL
    GROUP BY m.tenant, k.ckey HAVING sum(m.n) <> 0
  ) d;
  IF v_tenants IS NULL THEN RETURN NULL; END IF;
  -- shared, before the deltas take their seq: the fold waits for the writers in progress
  PERFORM pg_advisory_xact_lock_shared(:SCHEMA.running_lock(), 0);
  INSERT INTO :SCHEMA.running_deltas (tenant, ckey, n) SELECT * FROM unnest(v_tenants, v_keys, v_ns);
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_count_running_update AFTER UPDATE ON :SCHEMA.jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.count_running();
CREATE TRIGGER jobs_count_running_delete AFTER DELETE ON :SCHEMA.jobs
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.count_running();

-- Folds the deltas into the base. A try-lock: while a writer holds the lock shared it
-- gives up (the next pass folds); held, every delta visible is committed and no other
-- can appear before this commits. Returns how many deltas were folded.
CREATE FUNCTION :SCHEMA.fold_running() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_upto bigint;
  v_n integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(:SCHEMA.running_lock(), 0) THEN RETURN 0; END IF;
  SELECT f.upto INTO v_upto FROM :SCHEMA.running_fold f;
  WITH gone AS (
    DELETE FROM :SCHEMA.running_deltas d WHERE d.seq > v_upto RETURNING d.*
  ),
  sums AS (
    SELECT g.tenant, g.ckey, sum(g.n)::integer AS n FROM gone g GROUP BY g.tenant, g.ckey
  ),
  merged AS (
    INSERT INTO :SCHEMA.running_base AS b (tenant, ckey, n)
    SELECT s.tenant, s.ckey, s.n FROM sums s WHERE s.n <> 0
    ON CONFLICT (tenant, ckey) DO UPDATE SET n = b.n + excluded.n
  )
  SELECT count(*), max(g.seq) INTO v_n, v_upto FROM gone g;
  IF v_n = 0 THEN RETURN 0; END IF;
  UPDATE :SCHEMA.running_fold SET upto = v_upto;
  DELETE FROM :SCHEMA.running_base b WHERE b.n = 0;
  RETURN v_n;
END $$;

-- The upkeep of the pieces above: idle pairs out (under the arrivals lock, waited for),
-- old marks renewed, marks, serves and looks behind the newest out. Returns the pairs
-- removed.
CREATE FUNCTION :SCHEMA.prune_lanes() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
  w :SCHEMA.lane_prune;
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
  -- A fresh snapshot after the lock: an arrival it misses is one the next look sees.
  -- Pairs with no work and no claim for a minute out.
  WITH idle AS MATERIALIZED (
    SELECT a.queue, a.tenant FROM :SCHEMA.active_pairs a
    WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.lane_marks m
                      WHERE m.queue = a.queue AND m.tenant = a.tenant AND m.claimed
                        AND m.at > now() - interval '1 minute')
  ),
  busy AS (
    SELECT b.queue, b.tenant FROM unnest(:SCHEMA.pairs_with_work(
      ARRAY(SELECT ROW(i.queue, i.tenant, NULL):::SCHEMA.lane FROM idle i))) b
  )
  DELETE FROM :SCHEMA.active_pairs a USING idle i
  WHERE a.queue = i.queue AND a.tenant = i.tenant
    AND NOT EXISTS (SELECT 1 FROM busy b WHERE b.queue = a.queue AND b.tenant = a.tenant);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  -- Marks kept fresh: a reader's scan of arrivals starts at the oldest mark it holds, so
  -- a lane not claimed for a while (full, paused, idle) would pull it back. A mark older
  -- than a second gets a successor at the same position under this snapshot when no job
  -- at or before the position arrived since: then every job available in this snapshot at
  -- or before it is gone, as the old mark said of its own.
  WITH stale AS MATERIALIZED (
    SELECT a.queue, a.tenant, m.priority, m.id, m.xmax, m.xip FROM :SCHEMA.active_pairs a
    CROSS JOIN LATERAL :SCHEMA.lane_mark(a.queue, a.tenant) m
    WHERE m.at < now() - interval '1 second'
  ),
  arr AS MATERIALIZED (
    SELECT a.* FROM :SCHEMA.arrivals_since(
      (SELECT min(s.xmax) FROM stale s), ARRAY(SELECT DISTINCT x FROM stale s, unnest(s.xip) x)) a
  )
  INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap, claimed)
  SELECT s.queue, s.tenant, s.priority, s.id, pg_current_snapshot(), false FROM stale s
  WHERE NOT EXISTS (SELECT 1 FROM arr a
                    WHERE a.queue = s.queue AND a.tenant = s.tenant
                      AND (a.avail_xid >= s.xmax OR a.avail_xid = ANY (s.xip))
                      AND (a.priority, a.id) <= (s.priority, s.id));
  -- Marks, serves and looks that have a newer one of their own are read no more. Each
  -- pass deletes them from a little before where the previous one stopped, on the seq key:
  -- a pass does not read again the rows earlier passes deleted (dead and kept while a
  -- horizon is pinned). The overlap takes up rows that were not yet committed when the
  -- previous pass ran; every 100th pass starts from the beginning.
  UPDATE :SCHEMA.lane_prune SET passes = passes + 1 RETURNING * INTO w;
  DELETE FROM :SCHEMA.lane_marks m
  WHERE m.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.marks - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.lane_marks n
                WHERE n.queue = m.queue AND n.tenant = m.tenant AND n.seq > m.seq);
  DELETE FROM :SCHEMA.tenant_serves s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.serves - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.tenant_serves n WHERE n.tenant = s.tenant AND n.seq > s.seq);
  DELETE FROM :SCHEMA.pair_scans s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.scans - 5000 END
    AND s.seq < (SELECT max(n.seq) FROM :SCHEMA.pair_scans n);
  UPDATE :SCHEMA.lane_prune SET
    marks = coalesce((SELECT max(m.seq) FROM :SCHEMA.lane_marks m), marks),
    serves = coalesce((SELECT max(s.seq) FROM :SCHEMA.tenant_serves s), serves),
    scans = coalesce((SELECT max(s.seq) FROM :SCHEMA.pair_scans s), scans);
  RETURN v_n;
END $$;

-- The claim

-- Claims up to p_limit available jobs for worker p_worker (NULL for a lease taken through
-- fetch_jobs). Tenants with a free slot are served least recently served first,
-- round-robin by job: the first job of every eligible tenant, then the second, ... Inside
-- a tenant, FIFO by (priority, id); a concurrency key gets at most the tenant's per_key
-- running jobs. Lanes with no free slot are never read; a tenant row locked by another
-- claim is skipped, so claimers never wait on each other.
--
-- Exactness. A limited tenant (slots, a per-key limit or a rate limit) is claimed only
-- under its row lock (FOR UPDATE SKIP LOCKED), by a statement that starts after the lock
-- is taken: it sees every claim committed before, so its count of running jobs, and of
-- its starts in the rate window, is exact (part 3). An unlimited tenant needs no count;
-- its claims share an advisory lock instead, so they run in parallel (their jobs are
-- picked with SKIP LOCKED), while a change of its limits waits for them (set_tenant,
-- set_default_slots, set_tenant_rate) and the claim re-checks the limits after taking
-- the lock.
--
-- Tenants before lanes. The claim finds the (queue, tenant) pairs with work (ready_pairs:
-- one look whatever the backlog, however many keys), chooses its tenants, and only then
-- reads their jobs: in (priority, id) order across all keys for a tenant without a
-- per-key limit (keys do not matter to it), or per key for a tenant with one — at most
-- config.key_lanes keys (default 1 000) of a pair per claim, in key order. Beyond that
-- window a tenant's keys wait their turn (FIFO holds among the keys in the window); the
-- window bounds what a tenant flooding keys costs its own claims. Walking every distinct
-- lane (queue, tenant, key) with work instead, one tenant enqueueing 150 000 jobs with
-- distinct concurrency keys made every other tenant's fetch of one job take 1.5-2.4 s.
--
-- Each lane is read from its mark, plus the arrivals since (see the top of this part);
-- step 4 writes the lanes' new marks.
--
-- Measured when fair claims were introduced (npm run bench -- fairness, PostgreSQL 15,
-- 2 cores): tenant A floods 1 000 000 jobs with 5 slots, 50 tenants have 1 job each, 2
-- processes x 16 workers. One claim takes 1.87 ms with A at 1 000 jobs and 2.15 ms at
-- 1 000 000 (1.15x); the small tenants' jobs start p50 1.9 ms, p99 6.7 ms after enqueue.
-- A claim query without lanes in the same run: 0.6 ms -> 161 ms per claim (270x) and p99
-- 4.4 s; a plain global FIFO starts none in 30 s. A per-tenant `running` counter
-- decremented by completions was the alternative; it makes completions lock tenant rows
-- that claims then skip, for no gain in exactness.
CREATE FUNCTION :SCHEMA.claim_jobs(
  p_worker integer,
  p_limit integer,
  p_lease_ms integer,
  p_queues text[] DEFAULT NULL,
  p_tenant text DEFAULT NULL,
  p_max_tenants integer DEFAULT 64,
  p_async_commit boolean DEFAULT false
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
-- Row estimates of unnest() make these plans look expensive: JIT would cost ~0.5 s a
-- call, and plpgsql would build a fresh custom plan on every call. Their cost does not
-- depend on the parameters' values, so one generic plan per session serves.
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_pairs :SCHEMA.lane[];
  v_lanes :SCHEMA.lane[];
  v_candidates text[];
  v_exclusive text[];
  v_shared text[];
  v_ids bigint[];
  v_tids tid[];
  v_mark_queues text[];
  v_mark_tenants text[];
  v_mark_priorities smallint[];
  v_mark_ids bigint[];
  v_mark_snaps pg_snapshot[];
  v_queues text[];
  v_tenants text[];
  v_priorities smallint[];
  v_default integer;
  v_space integer := :SCHEMA.tenant_lock_space();
  v_now timestamptz;
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- A worker's claim (its own transaction) need not wait for its WAL to reach disk: lost
  -- in a crash, the jobs are simply available again (a completion of the lost claim is
  -- fenced out: its token is never handed out again). Enqueues and completions keep
  -- synchronous commits; a caller's own transaction is left alone (the default).
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- (queue, tenant) pairs with work: what other tenants have waiting, however many
  -- concurrency keys, costs nothing here
  v_pairs := :SCHEMA.ready_pairs(p_queues, p_tenant);
  IF v_pairs IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT l.tenant) INTO v_candidates FROM unnest(v_pairs) l;

  -- Tenants first seen in jobs (SQL inserts, new tenants) get their row here, not at
  -- enqueue, so enqueue never takes a lock a caller's transaction would hold.
  INSERT INTO :SCHEMA.tenants (tenant)
  SELECT c.tenant FROM unnest(v_candidates) c(tenant)
  WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.tenants t WHERE t.tenant = c.tenant)
  ON CONFLICT DO NOTHING;
  SELECT default_slots INTO v_default FROM :SCHEMA.config;

  -- 1a. Limited tenants that look eligible (not paused, a slot free and starts left in
  --     the rate window by this snapshot): lock their rows, least recently served first.
  --     Full tenants are filtered out before the LIMIT, so they cannot crowd out tenants
  --     with room, and are not locked, so they hold back no other claim.
  SELECT coalesce(array_agg(e.tenant), '{}') INTO v_exclusive FROM (
    SELECT t.tenant FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND (t.per_key IS NOT NULL OR coalesce(t.slots, v_default) IS NOT NULL OR t.rate_limit IS NOT NULL)
      AND :SCHEMA.rate_left(t, clock_timestamp()) > 0
      AND (coalesce(t.slots, v_default) IS NULL
           OR coalesce(t.slots, v_default) > :SCHEMA.running_now(t.tenant, ''))
    ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
    LIMIT least(p_max_tenants, p_limit)
    FOR UPDATE OF t SKIP LOCKED
  ) e;

  -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
  SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
    SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
    ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
    LIMIT least(p_max_tenants, p_limit)
  ) u
  WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
    AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
  IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

  -- The lanes of the chosen tenants: a (queue, tenant) pair read in (priority, id) order
  -- across its keys, or, for a tenant with a per-key limit, one lane per key (at most
  -- config.key_lanes of them per pair, in key order).
  SELECT array_agg(x.l) INTO v_lanes FROM (
    SELECT p AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
    WHERE t.per_key IS NULL AND (p.tenant = ANY (v_exclusive) OR p.tenant = ANY (v_shared))
    UNION ALL
    SELECT k AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
    CROSS JOIN LATERAL unnest(:SCHEMA.key_lanes(p.queue, p.tenant)) k
    WHERE t.per_key IS NOT NULL AND p.tenant = ANY (v_exclusive)
  ) x;
  IF v_lanes IS NULL THEN RETURN; END IF;

  -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
  --    exactly, and the starts left in their rate window (at v_now, read after the locks:
  --    claims of a tenant are serialized by its lock, so their v_now only grows and each
  --    start is counted in the window it falls in), re-check that the shared ones are
  --    still unlimited, and choose the jobs in round-robin order.
  v_now := clock_timestamp();
  WITH elig AS MATERIALIZED (  -- MATERIALIZED: computed once, not once per picked row
    SELECT t.tenant, :SCHEMA.served_at(t.tenant) AS last_served_at, t.per_key,
           t.tenant = ANY (v_shared) AS shared,
           least(:SCHEMA.rate_left(t, v_now),
             CASE WHEN lim.n IS NULL THEN p_limit
                  ELSE least(p_limit, lim.n - :SCHEMA.running_now(t.tenant, '')) END) AS free
    FROM :SCHEMA.tenants t
    CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
    WHERE t.tenant = ANY (v_exclusive)
       OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
           AND NOT t.paused)
  ),
  lanes AS MATERIALIZED (
    SELECT l.queue, l.tenant, l.concurrency_key, e.free, e.last_served_at, e.shared,
           CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                ELSE e.per_key - :SCHEMA.running_now(l.tenant, l.concurrency_key) END AS key_free,
           m.priority AS m_priority, m.id AS m_id, m.xmax AS m_xmax, m.xip AS m_xip, m.snap AS m_snap
    FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant
    CROSS JOIN LATERAL :SCHEMA.lane_mark(l.queue, l.tenant) m
    WHERE e.free > 0
  ),
  arr AS MATERIALIZED (
    SELECT a.* FROM :SCHEMA.arrivals_since(
      (SELECT min(n.m_xmax) FROM lanes n WHERE n.concurrency_key IS NULL),
      ARRAY(SELECT DISTINCT x FROM lanes n, unnest(n.m_xip) x WHERE n.concurrency_key IS NULL)) a
  ),
  -- Limited tenants' pair lanes (their claims are serialized by the tenant's row lock):
  -- the first jobs in lane order, the arrivals before the mark and the jobs after it.
  cands AS MATERIALIZED (
    SELECT n.queue, n.tenant, x.id, x.tid, x.priority
    FROM lanes n CROSS JOIN LATERAL (
      SELECT y.* FROM (
        (SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
         WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
           AND (j.priority, j.id) > (n.m_priority, n.m_id)
           AND (j.expires_at IS NULL OR j.expires_at > now())
         ORDER BY j.priority, j.id
         LIMIT n.free)
        UNION ALL
        SELECT a.id, a.tid, a.priority FROM arr a
        WHERE a.queue = n.queue AND a.tenant = n.tenant
          AND (a.avail_xid >= n.m_xmax OR a.avail_xid = ANY (n.m_xip))
          AND (a.priority, a.id) <= (n.m_priority, n.m_id)
          AND (a.expires_at IS NULL OR a.expires_at > now())
      ) y
      ORDER BY y.priority, y.id
      LIMIT n.free
    ) x
    WHERE NOT n.shared AND n.concurrency_key IS NULL
  ),
  -- Unlimited tenants' lanes are claimed in parallel: their jobs are locked (SKIP LOCKED),
  -- first the arrivals before the mark (they come first in lane order), then from the mark
  -- on, as far as it takes. MATERIALIZED: the locking runs once per lane.
  early AS MATERIALIZED (
    SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
      SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
      WHERE j.ctid = ANY (ARRAY(
              SELECT a.tid FROM arr a
              WHERE a.queue = n.queue AND a.tenant = n.tenant
                AND (a.avail_xid >= n.m_xmax OR a.avail_xid = ANY (n.m_xip))
                AND (a.priority, a.id) <= (n.m_priority, n.m_id)
                AND (a.expires_at IS NULL OR a.expires_at > now())))
        AND j.state IS NOT DISTINCT FROM 'available'  -- see the claim below
      ORDER BY j.priority, j.id
      LIMIT n.free
      FOR UPDATE OF j SKIP LOCKED
    ) p
    WHERE n.shared
  ),
  late AS MATERIALIZED (
    SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
      SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
        AND (j.priority, j.id) > (n.m_priority, n.m_id)
        AND (j.expires_at IS NULL OR j.expires_at > now())
      ORDER BY j.priority, j.id
      LIMIT n.free - (SELECT count(*) FROM early e WHERE e.queue = n.queue AND e.tenant = n.tenant)
      FOR UPDATE OF j SKIP LOCKED
    ) p
    WHERE n.shared
  ),
  locked AS (
    SELECT e.* FROM early e UNION ALL SELECT l.* FROM late l
  ),
  picked AS (
    -- key lanes of limited tenants: no row locks, since no other claim can pick their jobs
    SELECT p.id, p.tid, p.priority, n.queue, n.tenant, n.concurrency_key, n.free, n.key_free,
           n.last_served_at
    FROM lanes n CROSS JOIN LATERAL (
      SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
        AND j.concurrency_key = n.concurrency_key
        AND (j.expires_at IS NULL OR j.expires_at > now())
      ORDER BY j.priority, j.id
      LIMIT greatest(0, least(n.free, coalesce(n.key_free, n.free)))
    ) p
    WHERE NOT n.shared AND n.concurrency_key IS NOT NULL
    UNION ALL
    -- limited tenants without a per-key limit: the pair's candidates, no row locks either
    SELECT c.id, c.tid, c.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
           n.last_served_at
    FROM lanes n JOIN cands c ON c.queue = n.queue AND c.tenant = n.tenant
    WHERE NOT n.shared AND n.concurrency_key IS NULL
    UNION ALL
    -- unlimited tenants: what this claim locked
    SELECT k.id, k.tid, k.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
           n.last_served_at
    FROM locked k
    JOIN lanes n ON n.queue = k.queue AND n.tenant = k.tenant AND n.concurrency_key IS NULL
  ),
  keyed AS (  -- a key's lanes in several queues share its limit
    SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.concurrency_key ORDER BY p.priority, p.id) AS rk
    FROM picked p
  ),
  ranked AS (
    SELECT k.id, k.tid, k.queue, k.tenant, k.priority, k.free, k.last_served_at,
           row_number() OVER (PARTITION BY k.tenant ORDER BY k.priority, k.id) AS rn
    FROM keyed k WHERE k.key_free IS NULL OR k.rk <= k.key_free
  ),
  chosen AS MATERIALIZED (
    SELECT r.* FROM ranked r WHERE r.rn <= r.free
    ORDER BY r.rn, r.last_served_at, r.tenant
    LIMIT p_limit
  )
  -- the chosen jobs, each array in the same order (step 4 zips them), and the old marks
  -- of the pair lanes chosen from, for the new marks of step 4
  SELECT c.ids, c.tids, c.queues, c.tenants, c.priorities,
         m.queues, m.tenants, m.priorities, m.ids, m.snaps
  FROM (SELECT coalesce(array_agg(h.id ORDER BY h.rn, h.last_served_at, h.tenant), '{}') AS ids,
               array_agg(h.tid ORDER BY h.rn, h.last_served_at, h.tenant) AS tids,
               array_agg(h.queue ORDER BY h.rn, h.last_served_at, h.tenant) AS queues,
               array_agg(h.tenant ORDER BY h.rn, h.last_served_at, h.tenant) AS tenants,
               array_agg(h.priority ORDER BY h.rn, h.last_served_at, h.tenant) AS priorities
        FROM chosen h) c,
       (SELECT array_agg(n.queue) AS queues, array_agg(n.tenant) AS tenants,
               array_agg(n.m_priority) AS priorities, array_agg(n.m_id) AS ids, array_agg(n.m_snap) AS snaps
        FROM lanes n
        WHERE n.concurrency_key IS NULL
          AND EXISTS (SELECT 1 FROM chosen h WHERE h.queue = n.queue AND h.tenant = n.tenant)) m
  INTO v_ids, v_tids, v_queues, v_tenants, v_priorities,
       v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps;
  IF cardinality(v_ids) = 0 THEN RETURN; END IF;

  -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
  --    expired) has moved or is no longer available, and is left out. A rate-limited
  --    tenant's row is locked by this claim, so its starts are always counted.
  RETURN QUERY
  WITH claimed AS (
    UPDATE :SCHEMA.jobs j
    SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
        lease_token = nextval(':SCHEMA.lease_tokens'),
        started_at = v_now, lease_until = now() + p_lease_ms * interval '1 millisecond'
    -- IS NOT DISTINCT FROM: the same test (state is never null), but one that no partial
    -- index on `state = 'available'` matches, so the plan is a TID scan and not a whole
    -- scan of such an index, dead entries and all
    WHERE j.ctid = ANY (v_tids) AND j.state IS NOT DISTINCT FROM 'available'
    RETURNING j.*
  ),
  served AS (
    INSERT INTO :SCHEMA.tenant_serves (tenant) SELECT DISTINCT c.tenant FROM claimed c
  ),
  rated AS (
    UPDATE :SCHEMA.tenants t SET
      rate_window = :SCHEMA.rate_window(t.rate_per_ms, v_now),
      rate_used = n.n + t.rate_limit - :SCHEMA.rate_left(t, v_now)
    FROM (SELECT c.tenant, count(*)::integer AS n FROM claimed c GROUP BY c.tenant) n
    WHERE t.tenant = n.tenant AND t.rate_limit IS NOT NULL
  )
  SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
  ORDER BY o.ord;

  -- 4. The lanes' new marks, under a snapshot that sees this claim's own updates: a mark
  --    is valid when no job available in its snapshot sits at or before its position.
  --    Before the old mark, only arrivals since the old mark's snapshot can (none must be
  --    left); after it, the mark goes to the furthest job this claim took before the
  --    first job still available there — one a parallel claim holds (it may yet roll
  --    back), one committed late, or the next in line.
  INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap)
  SELECT l.queue, l.tenant, p.priority, p.id, pg_current_snapshot()
  FROM unnest(v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps)
       AS l(queue, tenant, priority, id, snap)
  LEFT JOIN LATERAL (
    SELECT j.priority, j.id FROM :SCHEMA.jobs j
    WHERE j.state = 'available' AND j.queue = l.queue AND j.tenant = l.tenant
      AND (j.priority, j.id) > (l.priority, l.id) AND (j.expires_at IS NULL OR j.expires_at > now())
    ORDER BY j.priority, j.id
    LIMIT 1
  ) f ON true
  CROSS JOIN LATERAL (
    SELECT c.priority, c.id FROM unnest(v_ids, v_queues, v_tenants, v_priorities) AS c(id, queue, tenant, priority)
    WHERE c.queue = l.queue AND c.tenant = l.tenant AND (c.priority, c.id) > (l.priority, l.id)
      AND (f.id IS NULL OR (c.priority, c.id) < (f.priority, f.id))
    ORDER BY c.priority DESC, c.id DESC
    LIMIT 1
  ) p
  WHERE NOT EXISTS (
    SELECT 1 FROM :SCHEMA.arrivals_since(pg_snapshot_xmax(l.snap), ARRAY(SELECT pg_snapshot_xip(l.snap))) a
    WHERE a.queue = l.queue AND a.tenant = l.tenant AND (a.priority, a.id) <= (l.priority, l.id)
      AND (a.expires_at IS NULL OR a.expires_at > now()));
END $$;

COMMENT ON FUNCTION :SCHEMA.claim_jobs(integer, integer, integer, text[], text, integer, boolean) IS
'Claims up to p_limit available jobs for worker p_worker (NULL: a lease from fetch_jobs).
Fairness: tenants with a free slot are served least recently served first (tenant_serves),
round-robin by job; inside a tenant FIFO by (priority, id); a concurrency key gets at most
the tenant''s per_key running jobs; lanes with no free slot are never read.
Exactness (000002, 000007, 000018): a limited tenant (slots or per-key limit) is claimed
only under its row lock (FOR UPDATE SKIP LOCKED) by a statement that starts after the
lock is taken, so its count of running jobs (running_base + running_deltas, 000023) sees
every claim committed before; unlimited tenants'' claims share an advisory lock and run in
parallel, picking jobs with SKIP LOCKED; a change of limits waits for them.
Pinned horizon (000023): each (queue, tenant) lane is read from its newest snapshot mark
(lane_marks) plus the jobs that arrived since that snapshot (jobs.avail_xid), so no read
starts at a front of dead index entries left by an open transaction. Measured with
npm run bench -- pinned (100 000 jobs claimed under a pinned xmin): 4.24 -> 68.48 ms a
claim before 000023, 5.89 -> 3.69 ms after. Each lease draws a fencing token from
the lease_tokens sequence, never reissued (000013).';


-- =======================================================================================
-- 6. Finish, requeue, cancel, retry, delete, progress
-- =======================================================================================
--
-- Fencing that no retry, stall or lost commit can fool: an outcome of a running job is
-- taken only with its lease token (lease_tokens, part 2), so a worker whose lease ran out
-- and whose job was claimed again changes nothing. Cancels stick: a running job whose
-- cancel was asked for ends `cancelled` whether it fails, is given back or is lost.
--
-- Planned per call. The functions that join a list of ids (at most a batch) to `jobs`
-- (finish_jobs and move_to_history, requeue_jobs, retry_jobs, set_progress here;
-- settle_dependents and wait_for, part 7; requeue_lost and heartbeat, parts 8 and 9) have
-- SET plan_cache_mode = force_custom_plan. Cached once per session, generic, a plan made
-- while `jobs` was small joins by a sequential scan, which under a pinned horizon reads
-- every dead row version the queue has left (measured: finish_jobs 2 ms before the pin,
-- 10 ms after 100 000 jobs). Planned on each call, a plan sees the table's size as it is
-- now (its pages, dead ones included) and looks the ids up; planning costs ~0.1 ms a call.

-- Appends one attempt's error to a job's error list, keeping the last 50.
-- STABLE like jsonb_build_array: a function claiming more is not inlined, and then
-- runs as a query of its own for every row.
CREATE FUNCTION :SCHEMA.append_error(p_errors jsonb, p_error jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_error IS NULL THEN p_errors
    WHEN jsonb_array_length(coalesce(p_errors, '[]')) >= 50 THEN (p_errors - 0) || jsonb_build_array(p_error)
    ELSE coalesce(p_errors, '[]') || jsonb_build_array(p_error)
  END
$$;

-- Milliseconds as integer, capped: a job that waited, or ran, more than 24.8 days keeps
-- 2147483647 rather than failing its batch (and, through the reaper, every upkeep).
CREATE FUNCTION :SCHEMA.capped_ms(p_from timestamptz, p_to timestamptz, p_plus bigint DEFAULT 0)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT least(2147483647, greatest(0, extract(epoch FROM p_to - p_from) * 1000 + coalesce(p_plus, 0)))::integer
$$;

-- Moves jobs to history in final state p_state, in one statement.
-- p_jobs: [{id, token?, result?, stats?, error?, run_ms?, queued_ms?, progress?}]
-- A running job is moved only with its lease token: a worker whose lease ran out and
-- whose job was claimed again cannot finish it. A job given without a token is moved
-- only if it is not running. A job whose cancel was asked for and that fails ends
-- `cancelled`, not `dead`. Its progress and its dependencies go to history with it.
-- Finishing a job says so: NOTIFY "<schema>:done" with the finished ids (comma-separated,
-- at most 900 a notification), so that tusk.waitFor() and long polls wake when their job
-- ends instead of polling; one notification per finishing statement, not per job.
-- Returns the ids moved, NULL for none.
CREATE FUNCTION :SCHEMA.move_to_history(p_state :SCHEMA.job_state, p_jobs jsonb)
RETURNS bigint[] LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, token bigint, result jsonb, stats jsonb, error jsonb,
      run_ms bigint, queued_ms bigint, progress jsonb)
  ),
  done AS (
    DELETE FROM :SCHEMA.jobs j USING input i
    WHERE j.id = i.id
      AND CASE WHEN i.token IS NULL THEN j.state <> 'running'
               ELSE j.state = 'running' AND j.lease_token = i.token END
    RETURNING j.*, i.result AS new_result, i.stats AS new_stats, i.error AS new_error,
              i.run_ms AS new_run_ms, coalesce(i.queued_ms, 0) AS new_queued_ms, i.progress AS new_progress
  ),
  history AS (
    INSERT INTO :SCHEMA.job_history (
      id, tenant, queue, task, payload, priority, state, attempts, max_attempts,
      concurrency_key, dedup_key, created_at, run_at, started_at, finished_at, expires_at,
      wait_ms, run_ms, result, errors, stats, source_type, source_id, source_method, retry, progress,
      depends_on, on_dependency_failure)
    SELECT d.id, d.tenant, d.queue, d.task, d.payload, d.priority,
      CASE WHEN p_state = 'dead' AND d.cancel_requested THEN 'cancelled' ELSE p_state END,
      d.attempts, d.max_attempts, d.concurrency_key, d.dedup_key, d.created_at, d.run_at,
      d.started_at + least(d.new_queued_ms, 2147483647) * interval '1 millisecond',
      now(),
      d.expires_at,
      CASE WHEN d.started_at IS NOT NULL THEN :SCHEMA.capped_ms(d.run_at, d.started_at, d.new_queued_ms) END,
      -- an external consumer acking does not know its run time: from the claim on
      CASE WHEN d.new_run_ms IS NOT NULL THEN least(greatest(d.new_run_ms, 0), 2147483647)::integer
           WHEN d.started_at IS NOT NULL THEN :SCHEMA.capped_ms(d.started_at, now()) END,
      d.new_result,
      :SCHEMA.append_error(d.errors, d.new_error),
      CASE WHEN d.new_stats IS NULL THEN d.stats ELSE coalesce(d.stats, '{}') || d.new_stats END,
      d.source_type, d.source_id, d.source_method, d.retry, coalesce(d.new_progress, d.progress),
      d.depends_on, d.on_dependency_failure
    FROM done d
  )
  SELECT array_agg(d.id) INTO v_ids FROM done d;
  IF v_ids IS NULL THEN RETURN NULL; END IF;
  -- for waitFor(): the finished ids, at most 900 a notification (a payload holds 8000 bytes)
  PERFORM pg_notify(:SCHEMA_LITERAL || ':done', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_ids) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 900;
  RETURN v_ids;
END $$;

-- Finishes jobs: the move to history, then their dependents (settle_dependents, part 7),
-- in a statement of its own: it sees the edges of an enqueue that committed while the
-- delete waited for its lock on the dependency. Every way a job ends goes through here.
-- Returns the ids that were finished.
CREATE FUNCTION :SCHEMA.finish_jobs(p_state :SCHEMA.job_state, p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
BEGIN
  -- opt-in (worker option asyncCommit): lost in a server crash, the jobs run again
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  v_ids := :SCHEMA.move_to_history(p_state, p_jobs);
  IF v_ids IS NULL THEN RETURN; END IF;
  PERFORM :SCHEMA.settle_dependents(v_ids, p_state = 'succeeded');
  RETURN QUERY SELECT unnest(v_ids);
END $$;

COMMENT ON FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean) IS
'Settles the outcomes of running jobs, fenced by lease token (an outcome of a lease that
was lost changes nothing): moves them to job_history with their result, errors, stats and
progress (move_to_history), then settles their dependents (settle_dependents: counted down
under row locks in id order, made available at zero, or cancelled up a flow when a
dependency failed), and announces their ids on <schema>:done (at most 900 a notification)
for waitFor and the event stream (000005, 000013, 000020, 000022, 000025).';

-- Puts running jobs back in the queue: after a failed attempt (error, delay_ms), on
-- graceful stop (refund: the attempt is not counted, the job never started), or when a
-- lease is given back or lost. Fenced by token like finish_jobs. A job whose cancel was
-- asked for is not put back: it ends `cancelled` (the cancel sticks).
-- p_jobs: [{id, token, delay_ms?, error?, queue?, stats?, refund?}]
CREATE FUNCTION :SCHEMA.requeue_jobs(p_jobs jsonb, p_async_commit boolean DEFAULT false)
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_cancelled jsonb;
  v_moved boolean;
BEGIN
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  RETURN QUERY
  WITH input AS (
    SELECT * FROM jsonb_to_recordset(p_jobs) AS x(
      id bigint, token bigint, delay_ms bigint, error jsonb, queue text, stats jsonb,
      refund boolean)
  ),
  moved AS (
    UPDATE :SCHEMA.jobs j SET
      state = CASE WHEN coalesce(i.delay_ms, 0) > 0 THEN 'failed':::SCHEMA.job_state
                   ELSE 'available':::SCHEMA.job_state END,
      run_at = now() + coalesce(i.delay_ms, 0) * interval '1 millisecond',
      attempts = j.attempts - CASE WHEN coalesce(i.refund, false) THEN 1 ELSE 0 END,
      locked_by = NULL,
      lease_until = NULL,
      lease_token = NULL,
      queue = coalesce(i.queue, j.queue),
      errors = :SCHEMA.append_error(j.errors, i.error),
      stats = CASE WHEN i.stats IS NULL THEN j.stats ELSE coalesce(j.stats, '{}') || i.stats END
    FROM input i
    -- checked again on the row's newest version if a cancel commits meanwhile
    WHERE j.id = i.id AND j.state = 'running' AND j.lease_token = i.token AND NOT j.cancel_requested
    RETURNING j.id
  )
  SELECT m.id FROM moved m;
  v_moved := FOUND;
  -- the rest, whose cancel was asked for: a statement of its own sees a cancel that
  -- committed while the update above waited for the row
  SELECT jsonb_agg(e.value) INTO v_cancelled
  FROM jsonb_array_elements(p_jobs) e
  JOIN :SCHEMA.jobs j ON j.id = (e.value->>'id')::bigint
  WHERE j.cancel_requested AND j.state = 'running' AND j.lease_token = (e.value->>'token')::bigint;
  IF v_cancelled IS NOT NULL THEN
    RETURN QUERY SELECT f.id FROM :SCHEMA.finish_jobs('cancelled', v_cancelled) f;
  END IF;
  IF v_moved THEN
    -- wakes idle workers: to claim what is available, or to time the next retry
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- Cancels a job. Waiting jobs end `cancelled` at once; a running job is asked to stop
-- (its worker aborts ctx.signal) and ends `cancelled` if it fails, is given back or its
-- lease is lost. The job's row is locked first, so a nack or requeue committing meanwhile
-- is waited for and its outcome seen: a live job is never answered "unknown".
-- Returns the job's state after the call, NULL for an unknown id.
CREATE FUNCTION :SCHEMA.cancel_job(p_id bigint)
RETURNS :SCHEMA.job_state LANGUAGE plpgsql AS $$
DECLARE
  v_state :SCHEMA.job_state;
BEGIN
  SELECT j.state INTO v_state FROM :SCHEMA.jobs j WHERE j.id = p_id FOR UPDATE;
  IF FOUND AND v_state = 'running' THEN
    UPDATE :SCHEMA.jobs SET cancel_requested = true WHERE id = p_id;
    PERFORM pg_notify(:SCHEMA_LITERAL || ':cancel', p_id::text);
    RETURN v_state;
  ELSIF FOUND THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', jsonb_build_array(jsonb_build_object('id', p_id)));
    RETURN 'cancelled';
  END IF;
  -- finished (or finished by a transaction that committed while this one waited)
  SELECT h.state INTO v_state FROM :SCHEMA.job_history h WHERE h.id = p_id LIMIT 1;
  RETURN v_state;
END $$;

-- Re-queues finished jobs (dead, cancelled, expired) and failed jobs waiting for a retry:
-- available now, attempts reset, errors kept, and their own retry policy and dedup key
-- kept (the key unless another unfinished job of the tenant holds it now). A retried
-- job's next claim gets a new token: leases from before are refused. A job revived with
-- dependencies waits for them again (those that failed cancel it again, unless its
-- policy says go on). Returns the ids re-queued.
CREATE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
RETURNS TABLE (id bigint) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_ids bigint[];
  v_links jsonb;
BEGIN
  WITH waiting AS (
    UPDATE :SCHEMA.jobs j SET state = 'available', run_at = now(), attempts = 0
    WHERE j.id = ANY (p_ids) AND j.state = 'failed'
    RETURNING j.id
  ),
  revived AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND h.state IN ('dead', 'cancelled', 'expired')
    RETURNING h.*
  ),
  back AS (
    INSERT INTO :SCHEMA.jobs (id, tenant, queue, task, payload, priority, state, run_at, attempts,
                              max_attempts, concurrency_key, expires_at, created_at, errors, stats,
                              source_type, source_id, source_method, retry, dedup_key,
                              depends_on, on_dependency_failure)
    SELECT r.id, r.tenant, r.queue, r.task, r.payload, r.priority, 'available', now(), 0,
           r.max_attempts, r.concurrency_key, NULL, r.created_at, r.errors, r.stats,
           r.source_type, r.source_id, r.source_method, r.retry,
           CASE WHEN NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs o
                                 WHERE o.tenant = r.tenant AND o.dedup_key = r.dedup_key)
                THEN r.dedup_key END,
           r.depends_on, r.on_dependency_failure
    FROM revived r
    RETURNING jobs.id, jobs.depends_on
  ),
  links AS (
    SELECT jsonb_agg(jsonb_build_object('id', b.id, 'deps', to_jsonb(b.depends_on))) AS links
    FROM back b WHERE b.depends_on IS NOT NULL
  )
  SELECT (SELECT array_agg(w.id) FROM waiting w) || (SELECT array_agg(b.id) FROM back b), (SELECT l.links FROM links l)
  INTO v_ids, v_links;
  IF v_links IS NOT NULL THEN
    PERFORM :SCHEMA.wait_for(v_links, false);
  END IF;
  IF v_ids IS NOT NULL THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
    RETURN QUERY SELECT unnest(v_ids);
  END IF;
END $$;

-- Deleting jobs (the dashboard's bulk delete, DELETE /api/jobs/:id): a job waiting to run
-- (available, scheduled, failed) or finished (in history) goes, with nothing left behind.
-- A running job is not deleted (cancel it: its handler is stopped); neither is a job other
-- jobs depend on (cancel it: its dependents are settled as a flow says). Returns each id's
-- outcome: deleted, running, has_dependents or not_found.
CREATE FUNCTION :SCHEMA.delete_jobs(p_ids bigint[])
RETURNS TABLE (id bigint, outcome text) LANGUAGE plpgsql AS $$
DECLARE
  v_locked bigint[];
  v_deleted bigint[];
BEGIN
  -- locked first, in id order: an enqueue naming one as a dependency has committed its
  -- edge or waits for this transaction, and the checks below, a statement later, see it
  SELECT array_agg(j.id ORDER BY j.id) INTO v_locked
  FROM (SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (p_ids) ORDER BY j.id FOR UPDATE) j;
  WITH gone AS (
    DELETE FROM :SCHEMA.jobs j
    WHERE j.id = ANY (v_locked) AND j.state IN ('available', 'scheduled', 'failed')
      AND NOT EXISTS (SELECT 1 FROM :SCHEMA.job_deps d WHERE d.dependency = j.id)
    RETURNING j.id),
  edges AS (DELETE FROM :SCHEMA.job_deps d USING gone g WHERE d.dependent = g.id)
  SELECT array_agg(g.id) INTO v_deleted FROM gone g;
  v_deleted := coalesce(v_deleted, '{}');
  WITH gone AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND NOT h.id = ANY (coalesce(v_locked, '{}'))
    RETURNING h.id)
  SELECT v_deleted || coalesce(array_agg(g.id), '{}') INTO v_deleted FROM gone g;
  RETURN QUERY
  SELECT x.id, CASE
    WHEN x.id = ANY (v_deleted) THEN 'deleted'
    WHEN j.state = 'running' THEN 'running'
    WHEN j.id IS NOT NULL THEN 'has_dependents'
    ELSE 'not_found' END
  FROM unnest(p_ids) AS x(id) LEFT JOIN :SCHEMA.jobs j ON j.id = x.id;
END $$;

-- Sets the progress of running jobs (ctx.progress), fenced by lease token, and announces
-- which it wrote on <schema>:progress (their ids, at most 900 a notification), for the
-- event stream (GET /api/events, event `progress`). A worker writes a job's progress at
-- most once a heartbeat, so the announcements are bounded the same way. Returns how many
-- were set.
CREATE FUNCTION :SCHEMA.set_progress(p_ids bigint[], p_tokens bigint[], p_values jsonb[])
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  v_set bigint[];
BEGIN
  WITH set AS (
    UPDATE :SCHEMA.jobs j SET progress = x.value
    FROM unnest(p_ids, p_tokens, p_values) AS x(id, token, value)
    WHERE j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
    RETURNING j.id)
  SELECT array_agg(set.id ORDER BY set.id) INTO v_set FROM set;
  IF v_set IS NULL THEN RETURN 0; END IF;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':progress', string_agg(u.x::text, ',' ORDER BY u.n))
  FROM unnest(v_set) WITH ORDINALITY u(x, n) GROUP BY (u.n - 1) / 900;
  RETURN cardinality(v_set);
END $$;


-- =======================================================================================
-- 7. Flows
-- =======================================================================================
--
-- A job may depend on other jobs. It waits until they have all ended, then runs if they
-- all succeeded; if one ended dead, cancelled or expired, it is cancelled too (its
-- `on_dependency_failure` 'cancel', the default) or runs all the same ('continue').
--
-- A waiting job is a job in state 'scheduled' with `waiting_on` > 0: the number of its
-- dependencies that have not ended yet. No claim reads it (claims read 'available' jobs)
-- and no promotion either (promote_due_jobs and next_due_at read only jobs with
-- waiting_on = 0, on the jobs_due index, which leaves waiting jobs out), so it starts
-- only when the last of its dependencies ends: the transaction that finishes that one
-- makes it available.
--
-- The edges that still matter are in job_deps: (dependency, dependent) for each
-- dependency that had not ended when the dependent was enqueued. Finishing a job (all of
-- it goes through finish_jobs) deletes the edges from it — only the transaction that
-- deleted the job from `jobs` gets there, so each edge is consumed once — and, in id order,
-- locks its dependents and counts them down; the one reaching 0 becomes available through
-- the jobs_available_again trigger (part 5), as an arrival. An edge to a job that has
-- ended meanwhile (cancelled while it waited) is consumed with no effect.
--
-- Race with an enqueue: a dependency could finish while a job that depends on it is being
-- enqueued, each transaction missing the other's rows. So the enqueue locks the
-- dependencies still in `jobs` (FOR KEY SHARE: claims, heartbeats, requeues and progress
-- go on; only deleting the row — finishing it — waits until the enqueue commits), and
-- looks up the others in history in a statement of its own, which sees a finish that
-- committed while the lock waited. finish_jobs reads the edges in a statement after its
-- delete, which sees an enqueue that committed while the delete waited.
--
-- The dependent row keeps the list of its dependencies (depends_on, also in history) so
-- that its handler can read their results (ctx.dependencies()).

-- The jobs p_ids have just ended (p_succeeded: all succeeded; else all did not): their
-- dependents are counted down, those reaching 0 made available (or left scheduled until
-- their own run_at); after a failure, the dependents that do not go on are cancelled, and
-- theirs after them (a loop, not a recursion: a chain of any length).
-- Lookups by key only (seqscan off): under a pinned horizon job_deps holds many dead edges.
CREATE FUNCTION :SCHEMA.settle_dependents(p_ids bigint[], p_succeeded boolean)
RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
AS $$
DECLARE
  v_ids bigint[] := p_ids;
  v_ok boolean := p_succeeded;
  v_dependents bigint[];
  v_counts integer[];
  v_firsts bigint[];
  v_cancel jsonb;
  v_released integer := 0;
  v_n integer;
BEGIN
  LOOP
    -- the edges from the jobs that ended, consumed
    WITH gone AS (
      DELETE FROM :SCHEMA.job_deps d WHERE d.dependency = ANY (v_ids)
      RETURNING d.dependency, d.dependent
    )
    SELECT array_agg(g.dependent ORDER BY g.dependent), array_agg(g.n ORDER BY g.dependent),
           array_agg(g.first ORDER BY g.dependent)
    INTO v_dependents, v_counts, v_firsts
    FROM (SELECT gone.dependent, count(*)::integer AS n, min(gone.dependency) AS first
          FROM gone GROUP BY gone.dependent) g;
    EXIT WHEN v_dependents IS NULL;
    -- the dependents, locked in id order (two transactions counting down the same ones
    -- never wait for each other in a cycle); NO KEY UPDATE, as the update below: an
    -- enqueue holding one of them as a dependency (KEY SHARE) does not hold this back
    PERFORM 1 FROM (SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (v_dependents)
                    ORDER BY j.id FOR NO KEY UPDATE) l;
    WITH counted AS (
      UPDATE :SCHEMA.jobs j SET
        waiting_on = j.waiting_on - x.n,
        run_at = CASE WHEN j.waiting_on = x.n THEN greatest(j.run_at, now()) ELSE j.run_at END,
        state = CASE WHEN j.waiting_on = x.n AND j.run_at <= now() THEN 'available' ELSE j.state END
      FROM unnest(v_dependents, v_counts) AS x(id, n)
      WHERE j.id = x.id AND j.waiting_on > 0
        AND (v_ok OR j.on_dependency_failure = 'continue')
      RETURNING j.state
    )
    SELECT count(*) FILTER (WHERE counted.state = 'available') INTO v_n FROM counted;
    v_released := v_released + v_n;
    EXIT WHEN v_ok;
    -- a dependency failed: the waiting dependents that do not go on end cancelled
    SELECT jsonb_agg(jsonb_build_object('id', j.id, 'error', jsonb_build_object(
             'attempt', j.attempts, 'at', now(), 'name', 'DependencyFailedError',
             'message', 'job ' || x.first || ', which it depends on, ended '
                        || coalesce((SELECT h.state::text FROM :SCHEMA.job_history h
                                     WHERE h.id = x.first LIMIT 1), 'unsuccessfully'))))
    INTO v_cancel
    FROM unnest(v_dependents, v_firsts) AS x(id, first)
    JOIN :SCHEMA.jobs j ON j.id = x.id
    WHERE j.waiting_on > 0 AND coalesce(j.on_dependency_failure, 'cancel') = 'cancel';
    EXIT WHEN v_cancel IS NULL;
    v_ids := :SCHEMA.move_to_history('cancelled', v_cancel);
    EXIT WHEN v_ids IS NULL;
  END LOOP;
  IF v_released > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;

-- Makes jobs wait for their dependencies. p_links: [{id, deps: [ids, in order], at}], the
-- jobs being enqueued (or revived by a retry) in this transaction, in state 'scheduled'
-- or 'available'. A dependency that has not ended is waited for (an edge); one that
-- succeeded counts as done; one that failed cancels the job now, unless its policy is
-- 'continue'. An id that is no job: refused (p_strict, an enqueue: SQLSTATE 22023, the
-- field `at[k]` in the message and as the error's column, nothing written) or counted as
-- done (a retry: its history may have been deleted).
CREATE FUNCTION :SCHEMA.wait_for(p_links jsonb, p_strict boolean)
RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_from bigint[];
  v_to bigint[];
  v_ks integer[];
  v_ats text[];
  v_deps bigint[];
  v_open bigint[];
  v_free bigint[];
  v_held bigint;
  v_ended bigint[];
  v_states :SCHEMA.job_state[];
  v_bad record;
  v_cancel jsonb;
BEGIN
  SELECT array_agg(l.id), array_agg(d.dep), array_agg(d.k), array_agg(l.at)
  INTO v_from, v_to, v_ks, v_ats
  FROM jsonb_to_recordset(p_links) AS l(id bigint, deps jsonb, at text)
  CROSS JOIN LATERAL (
    SELECT (a.v #>> '{}')::bigint AS dep, a.k::integer AS k
    FROM jsonb_array_elements(l.deps) WITH ORDINALITY AS a(v, k)) d;
  IF v_from IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT x ORDER BY x) INTO v_deps FROM unnest(v_to) x;

  -- The dependencies still in `jobs`, locked all at once or none: a finishing batch
  -- deletes its rows in no set order, so waiting for one while holding others could close
  -- a cycle with it. When one is held (being finished, claimed, cancelled), wait for that
  -- one alone, holding none of them, and try again.
  LOOP
    BEGIN
      SELECT coalesce(array_agg(l.id), '{}') INTO v_open FROM (
        SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (v_deps) ORDER BY j.id FOR KEY SHARE NOWAIT) l;
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
    v_held := NULL;
    BEGIN
      SELECT coalesce(array_agg(l.id), '{}') INTO v_free FROM (
        SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (v_deps) FOR KEY SHARE SKIP LOCKED) l;
      SELECT min(j.id) INTO v_held FROM :SCHEMA.jobs j WHERE j.id = ANY (v_deps) AND j.id <> ALL (v_free);
      RAISE EXCEPTION USING ERRCODE = 'TK001';  -- rolls the locks back
    EXCEPTION WHEN SQLSTATE 'TK001' THEN
      NULL;
    END;
    IF v_held IS NOT NULL THEN
      BEGIN
        PERFORM 1 FROM :SCHEMA.jobs j WHERE j.id = v_held FOR KEY SHARE;  -- waits for its holder
        RAISE EXCEPTION USING ERRCODE = 'TK001';
      EXCEPTION WHEN SQLSTATE 'TK001' THEN
        NULL;
      END;
    END IF;
  END LOOP;

  -- the others have ended: how (a statement of its own, which sees a finish that committed
  -- while a lock above waited)
  SELECT coalesce(array_agg(h.id), '{}'), coalesce(array_agg(h.state), '{}') INTO v_ended, v_states
  FROM (SELECT DISTINCT ON (h.id) h.id, h.state FROM :SCHEMA.job_history h
        WHERE h.id = ANY (v_deps) AND h.id <> ALL (v_open)
        ORDER BY h.id, h.finished_at DESC) h;
  IF p_strict THEN
    SELECT t.at, t.k, t.dep INTO v_bad
    FROM unnest(v_ats, v_ks, v_to) AS t(at, k, dep)
    WHERE t.dep <> ALL (v_open) AND t.dep <> ALL (v_ended)
    ORDER BY t.at, t.k LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_bad.at || '[' || (v_bad.k - 1) || ']',
        MESSAGE = 'tusk: ' || v_bad.at || '[' || (v_bad.k - 1) || '] is not a job: no job has id ' || v_bad.dep
                  || ' (never enqueued, not committed yet, or finished and its history deleted)';
    END IF;
  END IF;

  INSERT INTO :SCHEMA.job_deps (dependency, dependent)
  SELECT DISTINCT t.dep, t.id FROM unnest(v_from, v_to) AS t(id, dep) WHERE t.dep = ANY (v_open)
  ON CONFLICT DO NOTHING;

  WITH edges AS (
    SELECT t.id, t.dep, min(t.k) AS k FROM unnest(v_from, v_to, v_ks) AS t(id, dep, k) GROUP BY t.id, t.dep
  ),
  per AS (
    SELECT e.id, array_agg(e.dep ORDER BY e.k) AS deps,
           count(*) FILTER (WHERE e.dep = ANY (v_open))::integer AS n,
           min(e.dep) FILTER (WHERE s.state <> 'succeeded') AS failed
    FROM edges e LEFT JOIN unnest(v_ended, v_states) AS s(id, state) ON s.id = e.dep
    GROUP BY e.id
  ),
  linked AS (
    UPDATE :SCHEMA.jobs j SET depends_on = p.deps, waiting_on = p.n,
      state = CASE WHEN p.n = 0 AND j.run_at <= now() THEN 'available' ELSE 'scheduled' END:::SCHEMA.job_state
    FROM per p WHERE j.id = p.id
    RETURNING j.id, j.attempts, j.on_dependency_failure, p.failed
  )
  SELECT jsonb_agg(jsonb_build_object('id', k.id, 'error', jsonb_build_object(
           'attempt', k.attempts, 'at', now(), 'name', 'DependencyFailedError',
           'message', 'job ' || k.failed || ', which it depends on, ended '
                      || (SELECT s.state::text FROM unnest(v_ended, v_states) AS s(id, state) WHERE s.id = k.failed))))
  INTO v_cancel
  FROM linked k
  WHERE k.failed IS NOT NULL AND coalesce(k.on_dependency_failure, 'cancel') = 'cancel';
  IF v_cancel IS NOT NULL THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('cancelled', v_cancel);
  END IF;
END $$;

-- Enqueues jobs and their dependencies in one statement. p_entries: the JSON array of
-- enqueue_entries (part 4) whose entries may also have `depends_on` (ids of existing
-- jobs), `after` (indexes of earlier entries of this array: a flow's children come before
-- their parent), `on_dependency_failure` ('cancel' or 'continue') and `deps_at` (the
-- field that named the ids, for errors). Returns the ids in input order.
-- SECURITY DEFINER (part 14): a producer, which may only insert and read jobs, enqueues a
-- flow; the edges, the locks and the updates are done as the owner.
CREATE FUNCTION :SCHEMA.enqueue_flow(p_entries jsonb)
RETURNS SETOF bigint LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_ids bigint[];
  v_links jsonb;
  v_bad record;
BEGIN
  -- rows are inserted in array order and identity values drawn in insert order, so the
  -- sorted ids are in input order; waiting ones as scheduled until wait_for says
  WITH ins AS (
    INSERT INTO :SCHEMA.jobs AS j (tenant, queue, task, payload, priority, state, run_at, max_attempts,
                                   concurrency_key, expires_at, retry, source_type, source_id, source_method,
                                   on_dependency_failure)
    SELECT coalesce(x.tenant, 'default'), coalesce(x.queue, 'default'), x.task,
           coalesce(x.payload, 'null'), coalesce(x.priority, 0),
           CASE WHEN r.run_at > now() OR x.depends_on IS NOT NULL OR x.after IS NOT NULL THEN 'scheduled'
                ELSE 'available' END:::SCHEMA.job_state,
           r.run_at, coalesce(x.max_attempts, 5), coalesce(x.concurrency_key, ''), x.expires_at, x.retry,
           x.source_type, x.source_id, x.source_method,
           CASE WHEN x.depends_on IS NOT NULL OR x.after IS NOT NULL THEN x.on_dependency_failure END
    FROM jsonb_to_recordset(p_entries) AS x(
           task text, payload jsonb, tenant text, queue text, priority smallint,
           run_at timestamptz, delay_ms bigint, max_attempts integer, concurrency_key text,
           expires_at timestamptz, retry jsonb, source_type text, source_id text, source_method text,
           depends_on jsonb, after jsonb, on_dependency_failure text)
    CROSS JOIN LATERAL (
      SELECT coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond') AS run_at) r
    RETURNING j.id)
  SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;
  IF v_ids IS NULL THEN RETURN; END IF;

  -- a job depends only on jobs that existed before it, or on earlier entries (`after`):
  -- no cycle can form
  SELECT x.at, a.k, a.v INTO v_bad
  FROM ROWS FROM (jsonb_to_recordset(p_entries) AS (depends_on jsonb, deps_at text)) WITH ORDINALITY AS x(depends_on, at, n)
  CROSS JOIN LATERAL jsonb_array_elements(coalesce(x.depends_on, '[]')) WITH ORDINALITY AS a(v, k)
  WHERE (a.v #>> '{}')::bigint = ANY (v_ids)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value', COLUMN = v_bad.at || '[' || (v_bad.k - 1) || ']',
      MESSAGE = 'tusk: ' || v_bad.at || '[' || (v_bad.k - 1) || '] is a job of this same call (' || v_bad.v
                || '): a job depends only on jobs enqueued before it';
  END IF;
  IF EXISTS (SELECT 1 FROM ROWS FROM (jsonb_to_recordset(p_entries) AS (after jsonb)) WITH ORDINALITY AS x(after, n)
             CROSS JOIN LATERAL jsonb_array_elements(coalesce(x.after, '[]')) AS a(v)
             WHERE (a.v #>> '{}')::bigint NOT BETWEEN 0 AND x.n - 2) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = 'tusk: after must list indexes of earlier entries';
  END IF;

  SELECT jsonb_agg(jsonb_build_object('id', v_ids[x.n], 'deps', d.deps, 'at', coalesce(x.at, 'dependsOn')))
  INTO v_links
  FROM ROWS FROM (jsonb_to_recordset(p_entries) AS (depends_on jsonb, after jsonb, deps_at text))
       WITH ORDINALITY AS x(depends_on, after, at, n)
  CROSS JOIN LATERAL (
    SELECT coalesce(x.depends_on, '[]') || coalesce((
      SELECT jsonb_agg(to_jsonb(v_ids[(a.v #>> '{}')::integer + 1]) ORDER BY a.k)
      FROM jsonb_array_elements(x.after) WITH ORDINALITY AS a(v, k)), '[]') AS deps) d
  WHERE x.depends_on IS NOT NULL OR x.after IS NOT NULL;
  PERFORM :SCHEMA.wait_for(v_links, true);
  RETURN QUERY SELECT unnest(v_ids);
END $$;


-- =======================================================================================
-- 8. Leases
-- =======================================================================================
--
-- The queue as SQL for workers in any language (Disque-style API), with (id, token)
-- leases:
--   SELECT id, lease_token, task, payload FROM tusk.fetch_jobs(10, 30000);  -- lease up to 10 jobs for 30 s
--   SELECT tusk.extend_lease(42, 7, 60000);              -- WORKING: keep it 60 s more
--   SELECT tusk.ack_job(42, 7, '{"ok": true}');          -- ACK (7: the lease_token fetched)
--   SELECT tusk.nack_job(42, 7, 5000, '{"message": "upstream down"}');   -- NACK, retry in 5 s
--
-- Consumers of the lease API (SQL, HTTP) may run with no Tusk process at all: fetch_jobs
-- itself gives back the expired leases of what it reads and promotes due jobs, so delays
-- and crash recovery hold without a worker. The rest of the upkeep (dead workers, expiry,
-- schedules, history) runs in any long-lived Tusk process, or `tusk upkeep`.
--
-- These four are SECURITY DEFINER (part 14): a worker role holds no privilege on any table.

-- Returns to the queue (or to `dead`, when out of attempts) those of p_ids that are
-- running and lost: lease expired, worker in p_dead_workers, or worker forgotten. Rows
-- another transaction holds are skipped (it is finishing them). The attempt counts.
-- Planned per call (part 6).
CREATE FUNCTION :SCHEMA.requeue_lost(p_ids bigint[], p_dead_workers integer[] DEFAULT '{}')
RETURNS TABLE (released integer, dead integer) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_retry jsonb;
  v_final jsonb;
BEGIN
  WITH lost AS (
    SELECT j.id, j.attempts, j.lease_token, j.attempts >= j.max_attempts AS final,
      CASE WHEN j.lease_until < now() THEN 'lease expired before the job finished'
           ELSE 'worker ' || j.locked_by || ' died while running the job' END AS why
    FROM :SCHEMA.jobs j
    WHERE j.id = ANY (p_ids) AND j.state = 'running'
      AND (j.lease_until < now()
           OR j.locked_by = ANY (p_dead_workers)
           OR (j.locked_by IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM :SCHEMA.workers w WHERE w.id = j.locked_by)))
    FOR UPDATE OF j SKIP LOCKED
  )
  SELECT
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE NOT final),
    jsonb_agg(jsonb_build_object('id', id, 'token', lease_token, 'error', e)) FILTER (WHERE final)
  INTO v_retry, v_final
  FROM (SELECT l.*, jsonb_build_object('attempt', l.attempts, 'message', l.why,
          'name', 'LostJobError', 'at', now()) AS e FROM lost l) x;
  -- only when there is something to do: finishing touches job_history, which a fetch
  -- with no expired lease in sight must not wait for
  RETURN QUERY SELECT
    CASE WHEN v_retry IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.requeue_jobs(v_retry)) END,
    CASE WHEN v_final IS NULL THEN 0 ELSE (SELECT count(*)::integer FROM :SCHEMA.finish_jobs('dead', v_final)) END;
END $$;

-- Leases up to p_count available jobs for p_lease_ms. A lease that runs out puts the job
-- back in the queue (the attempt counts). Each row's `lease_token` is the lease's token:
-- ack_job, nack_job and extend_lease need it. First, up to 100 expired leases of the
-- asked queue and tenant go back to the queue, and up to 1 000 due jobs are promoted.
CREATE FUNCTION :SCHEMA.fetch_jobs(
  p_count integer, p_lease_ms integer, p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM :SCHEMA.requeue_lost(ARRAY(
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state = 'running' AND j.lease_until < now()
      AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
    LIMIT 100));
  PERFORM :SCHEMA.promote_due_jobs(1000);
  RETURN QUERY SELECT * FROM :SCHEMA.claim_jobs(NULL, p_count, p_lease_ms,
    CASE WHEN p_queue IS NULL THEN NULL ELSE ARRAY[p_queue] END, p_tenant);
END $$;

-- Completes a leased job. False if the lease is not held any more (it ran out and the job
-- was leased again, or it was already acked): a lease is acked at most once.
CREATE FUNCTION :SCHEMA.ack_job(p_id bigint, p_token bigint, p_result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT EXISTS (SELECT 1 FROM :SCHEMA.finish_jobs('succeeded',
    jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'result', p_result))))
$$;

-- Gives a leased job back after a failed attempt: it is retried after p_delay_ms, or ends
-- `dead` if it has no attempts left (`cancelled` if its cancel was asked for). Returns
-- the job's state after the call, NULL if the lease is not held any more.
CREATE FUNCTION :SCHEMA.nack_job(
  p_id bigint, p_token bigint, p_delay_ms integer DEFAULT 0, p_error jsonb DEFAULT NULL
) RETURNS :SCHEMA.job_state LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_job :SCHEMA.jobs;
  v_error jsonb;
BEGIN
  SELECT * INTO v_job FROM :SCHEMA.jobs
  WHERE id = p_id AND lease_token = p_token AND state = 'running' FOR UPDATE;
  IF NOT FOUND THEN RETURN NULL; END IF;
  v_error := jsonb_build_object('attempt', v_job.attempts, 'at', now(), 'name', 'Nack',
    'message', 'given back by its consumer') || coalesce(p_error, '{}');
  IF v_job.cancel_requested OR v_job.attempts >= v_job.max_attempts THEN
    PERFORM 1 FROM :SCHEMA.finish_jobs('dead',
      jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'error', v_error)));
    RETURN CASE WHEN v_job.cancel_requested THEN 'cancelled' ELSE 'dead' END;
  END IF;
  PERFORM 1 FROM :SCHEMA.requeue_jobs(jsonb_build_array(jsonb_build_object(
    'id', p_id, 'token', p_token, 'error', v_error, 'delay_ms', greatest(0, coalesce(p_delay_ms, 0)))));
  RETURN CASE WHEN coalesce(p_delay_ms, 0) > 0 THEN 'failed' ELSE 'available' END;
END $$;

-- WORKING: the lease of a leased job now ends p_ms from now. Returns the new end, NULL
-- if the lease is not held any more.
CREATE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  UPDATE :SCHEMA.jobs SET lease_until = now() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until
$$;


-- =======================================================================================
-- 9. Workers
-- =======================================================================================

-- A worker's id is the key of a session advisory lock (hashtext(schema), id) that it
-- holds on its listening connection: the lock disappears the moment that connection does.
-- Only the positive keys under hashtext(schema) are workers: the migration's lock (-1,
-- src/migrate/migrate.ts) shares that space (-1 read as an integer overflowed while a
-- migration ran).
CREATE FUNCTION :SCHEMA.live_worker_ids()
RETURNS integer[] LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(l.objid::bigint::integer), '{}')
  FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    AND l.classid = hashtext(:SCHEMA_LITERAL)::oid
    AND l.objid::bigint BETWEEN 1 AND 2147483647
$$;

-- Registers a worker (or re-registers it under its old id after a reconnect) and takes
-- its lock. Returns the worker id; a new id if the old one is still locked elsewhere.
--
-- A worker registers between upkeep passes, never during one. A pass (maintain) decides
-- at its start which workers are dead (their session lock free), then hands back their
-- running jobs and deletes their rows. A worker whose connection came back within a pass
-- would have the row it had just written deleted, and the jobs it claimed next handed
-- back as a dead worker's (no row) while it ran them: they would run twice. So
-- registering takes the pass's lock, shared, for its transaction: it waits for a pass in
-- progress to end (a pass is short), and a pass that starts meanwhile is skipped (the
-- next comes soon). The lock is maintain's: (hashtext of the schema's quoted name, 0);
-- the number in the comment inside the body is the schema version that gave it that key.
CREATE FUNCTION :SCHEMA.register_worker(
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

CREATE FUNCTION :SCHEMA.unregister_worker(p_id integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM :SCHEMA.workers WHERE id = p_id;
  PERFORM pg_advisory_unlock(hashtext(:SCHEMA_LITERAL), p_id);
END $$;

-- Worker heartbeat: marks the worker alive, extends the leases it holds (when past half
-- their length), and reports which were cancelled or lost, by token. lease_left_ms: how
-- long the shortest lease still held runs, from the server's now() (which is after the
-- worker sent the call: counted from the send, it is a safe local deadline).
-- Planned per call (part 6).
CREATE FUNCTION :SCHEMA.heartbeat(p_worker integer, p_ids bigint[], p_tokens bigint[], p_lease_ms integer)
RETURNS TABLE (alive boolean, cancelled bigint[], lost bigint[], lease_left_ms integer) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_alive boolean;
BEGIN
  UPDATE :SCHEMA.workers SET heartbeat_at = now() WHERE id = p_worker;
  v_alive := FOUND;
  UPDATE :SCHEMA.jobs j SET lease_until = now() + p_lease_ms * interval '1 millisecond'
  FROM unnest(p_ids, p_tokens) AS x(id, token)
  WHERE j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
    AND j.lease_until < now() + p_lease_ms * interval '0.5 millisecond';
  RETURN QUERY
  WITH held AS (
    SELECT j.lease_token, j.cancel_requested, j.lease_until
    FROM unnest(p_ids, p_tokens) AS x(id, token)
    JOIN :SCHEMA.jobs j ON j.id = x.id AND j.lease_token = x.token AND j.state = 'running'
  )
  SELECT v_alive,
    (SELECT coalesce(array_agg(h.lease_token), '{}') FROM held h WHERE h.cancel_requested),
    (SELECT coalesce(array_agg(x), '{}') FROM unnest(p_tokens) x
      WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.lease_token = x)),
    (SELECT :SCHEMA.capped_ms(now(), min(h.lease_until)) FROM held h);
END $$;


-- =======================================================================================
-- 10. Upkeep
-- =======================================================================================

-- Makes due scheduled jobs and due retries available. Returns how many. Jobs waiting for
-- their dependencies are not due at their run_at but when those end (part 7).
-- The clock is read once: compared with clock_timestamp() in the scan itself, a volatile
-- value is no index bound, so every upkeep (every 500 ms) walked the whole jobs_due index
-- and read each scheduled job's row to filter it. With 1 000 000 jobs scheduled for
-- later, one upkeep took 1.6 s and halved a worker's drain rate.
CREATE FUNCTION :SCHEMA.promote_due_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
  v_now timestamptz := clock_timestamp();
BEGIN
  WITH due AS (
    SELECT j.id FROM :SCHEMA.jobs j
    WHERE j.state IN ('scheduled', 'failed') AND j.waiting_on = 0 AND j.run_at <= v_now
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

-- Finishes as `expired` the waiting jobs whose expires_at has passed. Returns how many.
CREATE FUNCTION :SCHEMA.expire_jobs(p_limit integer DEFAULT 10000)
RETURNS integer LANGUAGE sql AS $$
  SELECT count(*)::integer FROM :SCHEMA.finish_jobs('expired', (
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', e.id)), '[]')
    FROM (SELECT j.id FROM :SCHEMA.jobs j
          WHERE j.expires_at <= now() AND j.state <> 'running'
          ORDER BY j.expires_at LIMIT p_limit) e))
$$;

-- When a worker should look again: the next scheduled job or retry, or the next window
-- of a rate-limited tenant that has used up the current one. NULL if nothing is due.
-- Waiting jobs are left out (a waiting job is due when its dependencies end, not at its
-- run_at: counting it would wake idle workers for nothing).
CREATE FUNCTION :SCHEMA.next_due_at()
RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT least(
    (SELECT min(j.run_at) FROM :SCHEMA.jobs j WHERE j.state IN ('scheduled', 'failed') AND j.waiting_on = 0),
    (SELECT to_timestamp(min((t.rate_window + 1) * t.rate_per_ms) / 1000.0) FROM :SCHEMA.tenants t
     WHERE t.rate_limit IS NOT NULL AND t.rate_used >= t.rate_limit
       AND t.rate_window >= :SCHEMA.rate_window(t.rate_per_ms, now())))
$$;

-- How long until the next scheduled job or retry is due, or a rate window reopens, in
-- milliseconds by the database's clock (0: now; NULL: nothing pending). Workers wait
-- this long: a worker's own clock may be ahead or behind.
CREATE FUNCTION :SCHEMA.next_due_in_ms()
RETURNS bigint LANGUAGE sql STABLE AS $$
  -- greatest() skips NULLs: nothing pending must stay NULL, not become "due now"
  SELECT CASE WHEN d.at IS NULL THEN NULL
              ELSE greatest(0, ceil(extract(epoch FROM d.at - clock_timestamp()) * 1000))::bigint END
  FROM (SELECT :SCHEMA.next_due_at() AS at) d
$$;

-- Returns to the queue (or to `dead`, when out of attempts) the running jobs whose
-- worker died or whose lease ran out (requeue_lost, part 8), then forgets dead workers.
-- The attempt counts. A worker is dead when its lock is gone. After a server restart
-- every lock is gone: workers last seen before the start get p_grace_ms to reconnect
-- (re-registering takes the lock again); lease expiry still applies meanwhile.
CREATE FUNCTION :SCHEMA.reap(p_grace_ms integer DEFAULT 10000)
RETURNS TABLE (released integer, dead integer, workers integer) LANGUAGE plpgsql AS $$
DECLARE
  v_live integer[];
  v_dead_workers integer[] := '{}';
  r record;
  v_forgotten integer;
BEGIN
  v_live := :SCHEMA.live_worker_ids();
  SELECT coalesce(array_agg(w.id), '{}') INTO v_dead_workers
  FROM :SCHEMA.workers w
  WHERE w.id <> ALL (v_live)
    AND (w.heartbeat_at > pg_postmaster_start_time()
         OR clock_timestamp() - pg_postmaster_start_time() > p_grace_ms * interval '1 millisecond');
  SELECT * INTO r FROM :SCHEMA.requeue_lost(
    ARRAY(SELECT j.id FROM :SCHEMA.jobs j WHERE j.state = 'running'), v_dead_workers);

  DELETE FROM :SCHEMA.workers w
  WHERE w.id = ANY (v_dead_workers)
    AND NOT EXISTS (SELECT 1 FROM :SCHEMA.jobs j WHERE j.state = 'running' AND j.locked_by = w.id);
  GET DIAGNOSTICS v_forgotten = ROW_COUNT;
  RETURN QUERY SELECT r.released, r.dead, v_forgotten;
END $$;

-- Periodic upkeep, run by one process at a time (the others skip it): reap, promote,
-- expire, keep history partitions ahead, prune the claim's bookkeeping (prune_lanes) and
-- fold its running counts (fold_running, last: writers wait for the fold's lock until
-- this transaction ends). Each step runs on its own: one that fails (a row no statement
-- can take, a lock timeout) is rolled back and reported in `errors`, and the others still
-- run. Returns what it did, NULL if skipped. Its lock is (hashtext of the schema's quoted
-- name, 0), which register_worker takes shared (part 9).
CREATE FUNCTION :SCHEMA.maintain(p_grace_ms integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_done jsonb := '{}';
  v_errors jsonb := '[]';
  r record;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(':SCHEMA'), 0) THEN
    RETURN NULL;
  END IF;
  BEGIN
    SELECT * INTO r FROM :SCHEMA.reap(p_grace_ms);
    v_done := v_done || jsonb_build_object('released', r.released, 'dead', r.dead, 'workers', r.workers);
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'reap', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('promoted', :SCHEMA.promote_due_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'promote', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('expired', :SCHEMA.expire_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'expire', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('partitions', :SCHEMA.ensure_history_partitions());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'partitions', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('idlePairs', :SCHEMA.prune_lanes());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'lanes', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  -- last: writers wait for the fold's lock until this transaction ends
  BEGIN
    v_done := v_done || jsonb_build_object('folded', :SCHEMA.fold_running());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fold', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  RETURN v_done || jsonb_build_object('errors', v_errors);
END $$;

COMMENT ON FUNCTION :SCHEMA.maintain(integer) IS
'The queue''s upkeep, one process at a time (advisory lock): gives back the jobs of leases
that ran out and of dead workers (after p_grace_ms when the server restarted), promotes
due delayed jobs, expires old ones, keeps history partitions ahead, prunes lane marks,
serves and pairs and folds running deltas; each step isolated, its failure reported
without stopping the others (000013, 000023).';


-- =======================================================================================
-- 11. Schedules
-- =======================================================================================
--
-- Recurring jobs. Cron expressions are read by the workers (croner); the database keeps
-- each schedule's next tick and guarantees one job per tick: a tick is enqueued only by
-- the transaction that inserts its (schedule, tick) row in schedule_runs, whose primary
-- key refuses a second one, and that moves next_run_at on from the value it read.
--
-- A paused schedule enqueues no tick (the upkeep's due list leaves it out), and the ticks
-- it had enqueued ahead and not started are cancelled. Resumed, it starts again at its
-- next tick from now: the ticks of the pause are skipped, as nobody wanted them run late
-- (backfill is for downtime, not for a pause). Setting a paused schedule again keeps it
-- paused.

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


-- =======================================================================================
-- 12. History
-- =======================================================================================
--
-- History at scale: day partitions made ahead, that repair the default one; retention (a
-- default and per-tenant overrides) by dropping whole day partitions, and batched deletes
-- for tenants kept shorter.
--
-- ensure_history_partitions, prune_history and maintain_history are SECURITY DEFINER
-- (part 14): history partitions are DDL, done as the owner, whoever runs the upkeep.

-- Runs p_sql with a short lock timeout; false (and nothing done) if a lock was not had in
-- time. Creating or dropping a partition locks job_history itself: it waits for every
-- reader of the table, and while it waits every completion queues behind it. A stall of
-- at most the timeout, then another try at a later upkeep, is better than a queue behind
-- a long report.
CREATE FUNCTION :SCHEMA.try_ddl(p_sql text, p_timeout text DEFAULT '50ms')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_old text := current_setting('lock_timeout');
BEGIN
  PERFORM set_config('lock_timeout', p_timeout, true);
  BEGIN
    EXECUTE p_sql;
  EXCEPTION WHEN lock_not_available THEN
    PERFORM set_config('lock_timeout', v_old, true);
    RETURN false;
  END;
  PERFORM set_config('lock_timeout', v_old, true);
  RETURN true;
END $$;

-- Creates the partition of one UTC day if missing. Rows of that day that went to the
-- default partition meanwhile (no upkeep ran for days: e.g. only SQL consumers acked)
-- are moved into it, so the default partition stays empty and never blocks a new day.
-- Returns whether it created the partition.
CREATE FUNCTION :SCHEMA.create_history_partition(p_day date)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_part text := 'job_history_' || to_char(p_day, 'YYYYMMDD');
  v_lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
  v_hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
  IF to_regclass(format('%I.%I', :SCHEMA_LITERAL, v_part)) IS NOT NULL THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM :SCHEMA.job_history_default d
                 WHERE d.finished_at >= v_lo AND d.finished_at < v_hi) THEN
    RETURN :SCHEMA.try_ddl(format(
      'CREATE TABLE %I.%I PARTITION OF %I.job_history FOR VALUES FROM (%L) TO (%L)',
      :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi));
  END IF;
  -- the check constraint lets ATTACH skip scanning the new table
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
                    CONSTRAINT in_range CHECK (finished_at >= %L AND finished_at < %L))',
                 :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi);
  EXECUTE format('WITH moved AS (DELETE FROM %I.job_history_default WHERE finished_at >= $1 AND finished_at < $2
                  RETURNING *) INSERT INTO %I.%I SELECT * FROM moved', :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part)
    USING v_lo, v_hi;
  IF NOT :SCHEMA.try_ddl(format('ALTER TABLE %I.job_history ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                                :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part, v_lo, v_hi)) THEN
    RAISE lock_not_available USING MESSAGE = 'job_history is busy: partition ' || v_part || ' not attached';
  END IF;
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT in_range', :SCHEMA_LITERAL, v_part);
  RETURN true;
END $$;

-- Creates the daily history partitions from yesterday to p_days_ahead days ahead (UTC
-- days), and those of past days found in the default partition. Returns how many.
CREATE FUNCTION :SCHEMA.ensure_history_partitions(p_days_ahead integer DEFAULT 3)
RETURNS integer LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  d date;
  created integer := 0;
BEGIN
  FOR d IN
    SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1,
                           (now() AT TIME ZONE 'UTC')::date + p_days_ahead, '1 day')::date
    UNION
    SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM :SCHEMA.job_history_default h
    ORDER BY 1
  LOOP
    BEGIN
      IF :SCHEMA.create_history_partition(d) THEN
        created := created + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      NULL;  -- the next upkeep tries again (the partitions are made days ahead)
    END;
  END LOOP;
  RETURN created;
END $$;

-- Applies retention, a batch at a time. A tenant's retention is its own, else the
-- default (config.retention); NULL keeps forever.
--  1. Day partitions older than the longest retention in force are dropped whole.
--  2. Tenants kept shorter than that have their older rows deleted, oldest first, at most
--     p_batch rows per call (through job_history_tenant), and so have rows older than the
--     longest retention left in the default partition.
-- Returns {"dropped": [partition, ...], "deleted": rows, "more": whether to call again}.
CREATE FUNCTION :SCHEMA.prune_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_default interval;
  v_longest interval;
  v_now timestamptz := now();
  v_dropped text[] := '{}';
  v_deleted integer := 0;
  v_n integer;
  v_upto timestamptz;
  v_more boolean := false;
  r record;
BEGIN
  SELECT c.retention INTO v_default FROM :SCHEMA.config c;
  -- the longest retention in force: NULL (forever) if the default keeps forever
  SELECT CASE WHEN v_default IS NULL THEN NULL
              ELSE greatest(v_default, max(t.retention)) END
  INTO v_longest FROM :SCHEMA.tenants t;

  IF v_longest IS NOT NULL THEN
    FOR r IN
      SELECT c.relname AS part FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = format('%I.job_history', :SCHEMA_LITERAL)::regclass
        AND c.relname ~ '^job_history_\d{8}$'
        AND (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= v_now - v_longest
      ORDER BY 1
    LOOP
      -- a busy table is left for the next upkeep (a minute later), not retried at once
      IF :SCHEMA.try_ddl(format('DROP TABLE %I.%I', :SCHEMA_LITERAL, r.part), '100ms') THEN
        v_dropped := v_dropped || r.part;
      END IF;
    END LOOP;
    DELETE FROM :SCHEMA.job_history_default d WHERE d.ctid = ANY (ARRAY(
      SELECT x.ctid FROM :SCHEMA.job_history_default x WHERE x.finished_at < v_now - v_longest LIMIT p_batch));
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
  END IF;

  -- tenants kept shorter than the longest retention: those with a shorter retention of
  -- their own and, when another tenant is kept longer than the default, every tenant
  -- under the default, found in the history itself (a loose index scan).
  FOR r IN
    WITH RECURSIVE seen AS (
      (SELECT h.tenant FROM :SCHEMA.job_history h WHERE v_default < v_longest ORDER BY h.tenant LIMIT 1)
      UNION ALL
      SELECT (SELECT h.tenant FROM :SCHEMA.job_history h WHERE h.tenant > s.tenant ORDER BY h.tenant LIMIT 1)
      FROM seen s WHERE s.tenant IS NOT NULL
    ),
    named AS (
      SELECT s.tenant FROM seen s WHERE s.tenant IS NOT NULL
      UNION
      SELECT t.tenant FROM :SCHEMA.tenants t WHERE t.retention IS NOT NULL
    )
    SELECT n.tenant, v_now - coalesce(t.retention, v_default) AS cutoff
    FROM named n LEFT JOIN :SCHEMA.tenants t ON t.tenant = n.tenant
    WHERE coalesce(t.retention, v_default) IS NOT NULL
      AND (v_longest IS NULL OR coalesce(t.retention, v_default) < v_longest)
    ORDER BY 2
  LOOP
    EXIT WHEN v_deleted >= p_batch;
    -- the oldest rows first, up to what is left of the batch
    SELECT h.finished_at INTO v_upto FROM :SCHEMA.job_history h
    WHERE h.tenant = r.tenant AND h.finished_at < r.cutoff
    ORDER BY h.finished_at LIMIT 1 OFFSET p_batch - v_deleted - 1;
    IF FOUND THEN
      v_more := true;
    ELSE
      v_upto := r.cutoff;
    END IF;
    DELETE FROM :SCHEMA.job_history h
    WHERE h.tenant = r.tenant AND h.finished_at < r.cutoff AND h.finished_at <= v_upto;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_deleted := v_deleted + v_n;
  END LOOP;
  RETURN jsonb_build_object('dropped', to_jsonb(v_dropped), 'deleted', v_deleted,
                            'more', v_more OR v_deleted >= p_batch);
END $$;

-- History upkeep, by one process at a time (the others get NULL): partitions ahead, then
-- a batch of retention. Its lock key is in a space of its own: (hashtext(schema), n) are
-- the workers' locks.
CREATE FUNCTION :SCHEMA.maintain_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_created integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':history'), 0) THEN
    RETURN NULL;
  END IF;
  v_created := :SCHEMA.ensure_history_partitions();
  RETURN :SCHEMA.prune_history(p_batch) || jsonb_build_object('created', v_created);
END $$;

-- Changes retention settings: a tenant's (p_tenant) or the default (p_tenant NULL).
-- p_reset sets it back to NULL (the default's, or forever for the default).
CREATE FUNCTION :SCHEMA.set_retention(p_tenant text, p_retention interval, p_reset boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_tenant IS NULL THEN
    UPDATE :SCHEMA.config SET retention = CASE WHEN p_reset THEN NULL ELSE coalesce(p_retention, retention) END;
    RETURN;
  END IF;
  INSERT INTO :SCHEMA.tenants AS t (tenant, retention) VALUES (p_tenant, p_retention)
  ON CONFLICT (tenant) DO UPDATE SET
    retention = CASE WHEN p_reset THEN NULL ELSE coalesce(p_retention, t.retention) END;
END $$;

-- The partitions of yesterday to three days ahead, from the start.
SELECT :SCHEMA.ensure_history_partitions();


-- =======================================================================================
-- 13. Paused queues, staged jobs
-- =======================================================================================

-- Pauses (p_paused) or resumes a queue; true if that changed anything. A resume wakes
-- idle workers. A claim finds its (queue, tenant) pairs through ready_pairs, which leaves
-- paused queues out.
CREATE FUNCTION :SCHEMA.pause_queue(p_queue text, p_paused boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF p_paused THEN
    INSERT INTO :SCHEMA.paused_queues (queue) VALUES (p_queue) ON CONFLICT DO NOTHING;
    RETURN FOUND;
  END IF;
  DELETE FROM :SCHEMA.paused_queues WHERE queue = p_queue;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
    RETURN true;
  END IF;
  RETURN false;
END $$;

-- Wakes the drainer (staged_jobs, part 2): one notification per staging statement.
CREATE FUNCTION :SCHEMA.notify_staged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(:SCHEMA_LITERAL || ':staged', '');
  RETURN NULL;
END $$;

CREATE TRIGGER staged_jobs_notify AFTER INSERT ON :SCHEMA.staged_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.notify_staged();


-- =======================================================================================
-- 14. API tokens and roles
-- =======================================================================================
--
-- Least-privilege roles (created by `tusk roles create`, see src/queries/roles.ts):
--   <prefix>_producer  enqueues and reads jobs: INSERT and SELECT on jobs, SELECT on history
--   <prefix>_worker    a consumer in any language: the lease functions only, no table
--   <prefix>_api       the HTTP server: every table but api_tokens, every function
-- What makes them minimal: the functions revoked below run as the schema's owner
-- (SECURITY DEFINER, search_path pinned, every name schema-qualified) and only the roles
-- granted them may call them — PostgreSQL lets PUBLIC execute a new function, so that is
-- revoked. They are:
--   the lease API (part 8)       fetch_jobs, ack_job, nack_job, extend_lease
--   enqueue (parts 4 and 7)      enqueue_dedup, enqueue_job, enqueue_jobs, enqueue_flow
--   history (part 12)            ensure_history_partitions, prune_history, maintain_history
--   API tokens (below)           find_token, live_token_hashes
-- A migration that restates one of these functions must restate SECURITY DEFINER and its
-- search_path: CREATE OR REPLACE resets them (it keeps the grants).

-- API tokens: the server checks them through these two; api_tokens itself is the owner's.
CREATE FUNCTION :SCHEMA.find_token(p_hash bytea)
RETURNS TABLE (id integer, tenant text, scopes text[]) LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH t AS (
    SELECT a.id, a.tenant, a.scopes, a.last_used_at FROM :SCHEMA.api_tokens a
    WHERE a.token_hash = p_hash AND a.revoked_at IS NULL),
  touched AS (  -- its use noted at most once a minute: busy clients do not write on every request
    UPDATE :SCHEMA.api_tokens a SET last_used_at = now() FROM t
    WHERE a.id = t.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
  SELECT t.id, t.tenant, t.scopes FROM t
$$;

CREATE FUNCTION :SCHEMA.live_token_hashes()
RETURNS SETOF bytea LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT a.token_hash FROM :SCHEMA.api_tokens a WHERE a.revoked_at IS NULL
$$;

REVOKE EXECUTE ON FUNCTION
  :SCHEMA.fetch_jobs(integer, integer, text, text),
  :SCHEMA.ack_job(bigint, bigint, jsonb),
  :SCHEMA.nack_job(bigint, bigint, integer, jsonb),
  :SCHEMA.extend_lease(bigint, bigint, integer),
  :SCHEMA.enqueue_dedup(jsonb),
  :SCHEMA.enqueue_job(text, jsonb, jsonb),
  :SCHEMA.enqueue_jobs(jsonb),
  :SCHEMA.enqueue_flow(jsonb),
  :SCHEMA.ensure_history_partitions(integer),
  :SCHEMA.maintain_history(integer),
  :SCHEMA.prune_history(integer),
  :SCHEMA.find_token(bytea),
  :SCHEMA.live_token_hashes()
FROM PUBLIC;
