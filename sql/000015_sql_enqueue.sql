-- Enqueue from SQL: triggers, migrations and programs in any language add jobs with the
-- options of the library's enqueue (camelCase keys, same names, meanings and bounds), and
-- write what it writes:
--   SELECT tusk.enqueue_job('send_welcome', '{"user_id": 42}', '{"queue": "mail", "delayMs": 5000}');
--   SELECT * FROM tusk.enqueue_jobs('[{"task": "a"}, {"task": "b", "payload": [1], "priority": -1}]');
-- A bad argument raises SQLSTATE 22023 (invalid_parameter_value) with a message naming the
-- field (`tusk: options.maxAttempts must be an integer from 1 to 1000 (got 0)`), and
-- nothing is written. Task definitions (payload schema, default queue, retry) live in the
-- application and do not apply here. Times (runAt, expiresAt) are ISO 8601 strings with a
-- time zone, as to_jsonb(timestamptz) writes them.

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
-- is the whole entry and its task and payload are named under it.
CREATE FUNCTION :SCHEMA.enqueue_entry(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
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
BEGIN
  PERFORM :SCHEMA.arg_object(o, p_at, ARRAY['tenant', 'queue', 'priority', 'runAt', 'delayMs', 'maxAttempts',
    'expiresAt', 'concurrencyKey', 'dedupe', 'dedupKey', 'dedupWindowMs', 'source', 'retry']
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

-- Writes checked entries as the library does: through enqueue_dedup when any has a dedup
-- key, else in one INSERT (one NOTIFY, by the jobs_notify trigger, sent at commit).
-- Returns each entry's job id and whether it matched an existing job, in input order.
CREATE FUNCTION :SCHEMA.enqueue_entries(p_entries jsonb)
RETURNS TABLE (id bigint, deduplicated boolean) LANGUAGE plpgsql AS $$
BEGIN
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
CREATE FUNCTION :SCHEMA.enqueue_job(p_task text, p_payload jsonb DEFAULT 'null', p_options jsonb DEFAULT '{}')
RETURNS bigint LANGUAGE plpgsql AS $$
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
CREATE FUNCTION :SCHEMA.enqueue_jobs(p_jobs jsonb)
RETURNS TABLE (id bigint, deduplicated boolean) LANGUAGE plpgsql AS $$
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
