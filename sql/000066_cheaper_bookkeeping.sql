-- The running counts' trigger and the completion's notifications, cheaper; the same rows
-- written and the same notifications sent.
--
-- count_running() grouped the changed rows twice (once per tenant, once per concurrency
-- key, through a lateral VALUES) and passed them between two statements in arrays; one
-- GROUPING SETS aggregate now does both. move_to_history() and set_progress() sorted the
-- ids they announce to cut them into notifications of at most 380; notify_ids() now takes
-- the array's slices, in order, for both. The bodies are those of the baseline
-- (count_running) and 000035 (set_progress; move_to_history, as planned since 000047) but
-- for these changes.

CREATE OR REPLACE FUNCTION :SCHEMA.count_running() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_tenants text[];
  v_keys text[];
  v_ns integer[];
BEGIN
  -- the rows that left 'running' (-1) and entered it (+1), per tenant ('') and per
  -- concurrency key; a lease renewed (-1 +1) writes nothing. new_rows only in an UPDATE.
  IF TG_OP = 'UPDATE' THEN
    SELECT array_agg(d.tenant), array_agg(d.ckey), array_agg(d.n) INTO v_tenants, v_keys, v_ns FROM (
      SELECT m.tenant, CASE WHEN grouping(m.concurrency_key) = 1 THEN '' ELSE m.concurrency_key END AS ckey,
             sum(m.n)::integer AS n
      FROM (SELECT o.tenant, o.concurrency_key, -1 AS n FROM old_rows o WHERE o.state = 'running'
            UNION ALL
            SELECT w.tenant, w.concurrency_key, 1 FROM new_rows w WHERE w.state = 'running') m
      GROUP BY GROUPING SETS ((m.tenant), (m.tenant, m.concurrency_key))
      HAVING sum(m.n) <> 0 AND (grouping(m.concurrency_key) = 1 OR m.concurrency_key <> '')) d;
  ELSE
    SELECT array_agg(d.tenant), array_agg(d.ckey), array_agg(d.n) INTO v_tenants, v_keys, v_ns FROM (
      SELECT o.tenant, CASE WHEN grouping(o.concurrency_key) = 1 THEN '' ELSE o.concurrency_key END AS ckey,
             -count(*)::integer AS n
      FROM old_rows o WHERE o.state = 'running'
      GROUP BY GROUPING SETS ((o.tenant), (o.tenant, o.concurrency_key))
      HAVING grouping(o.concurrency_key) = 1 OR o.concurrency_key <> '') d;
  END IF;
  IF v_tenants IS NULL THEN RETURN NULL; END IF;
  -- shared, before the deltas take their seq: the fold waits for the writers in progress
  PERFORM pg_advisory_xact_lock_shared(:SCHEMA.running_lock(), 0);
  INSERT INTO :SCHEMA.running_deltas (tenant, ckey, n) SELECT * FROM unnest(v_tenants, v_keys, v_ns);
  RETURN NULL;
END $$;

-- Announces ids on a channel, at most 380 a notification (20 characters each and their
-- commas: under the 8 000 bytes a payload may hold), in the array's order.
CREATE OR REPLACE FUNCTION :SCHEMA.notify_ids(p_channel text, p_ids bigint[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_ids), 0) BY 380 LOOP
    PERFORM pg_notify(p_channel, array_to_string(p_ids[i:i + 379], ','));
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.set_progress(p_ids bigint[], p_tokens bigint[], p_values jsonb[])
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  v_set bigint[];
BEGIN
  WITH set AS (
    UPDATE :SCHEMA.jobs j SET progress = x.value
    FROM unnest(p_ids, p_tokens, p_values) AS x(id, token, value)
    WHERE j.id = ANY (p_ids) AND j.id = x.id AND j.lease_token = x.token
      AND j.state IS NOT DISTINCT FROM 'running'
    RETURNING j.id)
  SELECT array_agg(set.id ORDER BY set.id) INTO v_set FROM set;
  IF v_set IS NULL THEN RETURN 0; END IF;
  PERFORM :SCHEMA.notify_ids(:SCHEMA_LITERAL || ':progress', v_set);
  RETURN cardinality(v_set);
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.move_to_history(p_state :SCHEMA.job_state, p_jobs jsonb) RETURNS bigint[]
LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
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
    WHERE j.id = ANY (ARRAY(SELECT i.id FROM input i)) AND j.id = i.id
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
  -- for waitFor() and the event stream
  PERFORM :SCHEMA.notify_ids(:SCHEMA_LITERAL || ':done', v_ids);
  RETURN v_ids;
END $$;
