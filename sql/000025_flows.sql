-- Flows: a job may depend on other jobs. It waits until they have all ended, then runs
-- if they all succeeded; if one ended dead, cancelled or expired, it is cancelled too
-- (its `on_dependency_failure` 'cancel', the default) or runs all the same ('continue').
--
-- A waiting job is a job in state 'scheduled' with `waiting_on` > 0: the number of its
-- dependencies that have not ended yet. No claim reads it (claims read 'available' jobs)
-- and no promotion either (promote_due_jobs and next_due_at read only jobs with
-- waiting_on = 0, on the due index rebuilt below), so it starts only when the last of its
-- dependencies ends: the transaction that finishes that one makes it available.
--
-- The edges that still matter are in job_deps: (dependency, dependent) for each
-- dependency that had not ended when the dependent was enqueued. Finishing a job (all of
-- it goes through finish_jobs) deletes the edges from it — only the transaction that
-- deleted the job from `jobs` gets there, so each edge is consumed once — and, in id order,
-- locks its dependents and counts them down; the one reaching 0 becomes available through
-- the update trigger of 000023, as an arrival. An edge to a job that has ended meanwhile
-- (cancelled while it waited) is consumed with no effect.
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

ALTER TABLE :SCHEMA.jobs
  ADD COLUMN depends_on bigint[],
  ADD COLUMN waiting_on integer NOT NULL DEFAULT 0,
  ADD COLUMN on_dependency_failure text;
-- NOT VALID: every existing row has waiting_on 0 and no policy; new rows are checked.
-- The first is what keeps a waiting job out of every claim: only a scheduled job waits.
ALTER TABLE :SCHEMA.jobs
  ADD CONSTRAINT jobs_waiting_check CHECK (waiting_on >= 0 AND (waiting_on = 0 OR state = 'scheduled')) NOT VALID,
  ADD CONSTRAINT jobs_on_dependency_failure_check
    CHECK (on_dependency_failure IN ('cancel', 'continue')) NOT VALID;
ALTER TABLE :SCHEMA.job_history
  ADD COLUMN depends_on bigint[],
  ADD COLUMN on_dependency_failure text;

CREATE TABLE :SCHEMA.job_deps (
  dependency bigint NOT NULL,
  dependent bigint NOT NULL,
  PRIMARY KEY (dependency, dependent)
);

-- Waiting jobs out of the due index: a promotion or a look for the next due time never
-- walks them, however many wait.
DROP INDEX :SCHEMA.jobs_due;
CREATE INDEX jobs_due ON :SCHEMA.jobs (run_at)
  WHERE state IN ('scheduled', 'failed') AND waiting_on = 0;

-- As in 000010, without the waiting jobs.
CREATE OR REPLACE FUNCTION :SCHEMA.promote_due_jobs(p_limit integer DEFAULT 10000)
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

-- As in 000013, without the waiting jobs (a waiting job is due when its dependencies
-- end, not at its run_at: counting it would wake idle workers for nothing).
CREATE OR REPLACE FUNCTION :SCHEMA.next_due_at()
RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT least(
    (SELECT min(j.run_at) FROM :SCHEMA.jobs j WHERE j.state IN ('scheduled', 'failed') AND j.waiting_on = 0),
    (SELECT to_timestamp(min((t.rate_window + 1) * t.rate_per_ms) / 1000.0) FROM :SCHEMA.tenants t
     WHERE t.rate_limit IS NOT NULL AND t.rate_used >= t.rate_limit
       AND t.rate_window >= :SCHEMA.rate_window(t.rate_per_ms, now())))
$$;

-- What finish_jobs did up to 000022 (the move to history and the notification), with the
-- dependencies kept in history. Returns the ids moved, NULL for none.
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

-- As in 000022, in two statements: the move to history, then the dependents (in a
-- statement of its own: it sees the edges of an enqueue that committed while the delete
-- waited for its lock on the dependency).
CREATE OR REPLACE FUNCTION :SCHEMA.finish_jobs(p_state :SCHEMA.job_state, p_jobs jsonb, p_async_commit boolean DEFAULT false)
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
-- enqueue_entries (see 000015) whose entries may also have `depends_on` (ids of existing
-- jobs), `after` (indexes of earlier entries of this array: a flow's children come before
-- their parent), `on_dependency_failure` ('cancel' or 'continue') and `deps_at` (the
-- field that named the ids, for errors). Returns the ids in input order.
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
REVOKE EXECUTE ON FUNCTION :SCHEMA.enqueue_flow(jsonb) FROM PUBLIC;

-- As in 000013, and a job revived with dependencies waits for them again (those that
-- failed cancel it again, unless its policy says go on).
CREATE OR REPLACE FUNCTION :SCHEMA.retry_jobs(p_ids bigint[])
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

-- Enqueue from SQL (000015) with dependencies: enqueue_job's and enqueue_jobs' options
-- take dependsOn (ids, as numbers or strings of digits) and onDependencyFailure; such
-- entries go through enqueue_flow. As in 000015 otherwise. Since 000024 the checked entry
-- is enqueue_entry_options, which enqueue_entry wraps with the recorded task definitions.
CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_entry_options(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
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

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_entries(p_entries jsonb)
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
