-- Helpers on hot paths written in PL/pgSQL, so that their statements are planned once per
-- connection.
--
-- A LANGUAGE sql function that PostgreSQL cannot inline (a FROM clause, a data-modifying
-- statement, SECURITY DEFINER or a SET clause) is parsed and planned again at every call.
-- look_snapshot() is called twice by every claim (the pair scan and the new marks) and
-- cost 130 µs a call of a claim's 1.1–1.8 ms (pg_stat_user_functions, enqueue and claim of
-- one job); as PL/pgSQL it costs 4. The others are called once per job or per request:
-- enqueue_entry (each entry of enqueue_job and enqueue_jobs), ack_job and extend_lease
-- (the lease API), find_token (each HTTP request). Their results are unchanged.

CREATE OR REPLACE FUNCTION :SCHEMA.look_snapshot() RETURNS pg_snapshot LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_snap pg_snapshot := pg_current_snapshot();
  v_own xid8 := pg_current_xact_id_if_assigned();
BEGIN
  -- pg_current_snapshot() leaves the transaction's own xid out of its list: put it in
  IF v_own IS NULL OR v_own >= pg_snapshot_xmax(v_snap) THEN
    RETURN v_snap;
  END IF;
  RETURN (least(pg_snapshot_xmin(v_snap), v_own)::text || ':' || pg_snapshot_xmax(v_snap)::text || ':'
          || (SELECT string_agg(u.x::text, ',' ORDER BY u.x)
              FROM (SELECT pg_snapshot_xip(v_snap) UNION SELECT v_own) u(x)))::pg_snapshot;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.enqueue_entry(p_task jsonb, p_payload jsonb, p_options jsonb, p_at text, p_entry boolean)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_entry jsonb := :SCHEMA.enqueue_entry_options(p_task, p_payload, p_options, p_at, p_entry);
BEGIN
  RETURN coalesce((
    SELECT jsonb_strip_nulls(jsonb_build_object('tenant', d.tenant, 'queue', d.queue, 'max_attempts', d.max_attempts))
    FROM :SCHEMA.task_definitions d WHERE d.task = v_entry ->> 'task'), '{}') || v_entry;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.ack_job(p_id bigint, p_token bigint, p_result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF p_token IS NULL THEN
    RETURN false;
  END IF;
  RETURN EXISTS (SELECT 1 FROM :SCHEMA.finish_jobs('succeeded',
    jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'result', p_result))));
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_until timestamptz;
BEGIN
  UPDATE :SCHEMA.jobs SET lease_until = now() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until INTO v_until;
  RETURN v_until;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.find_token(p_hash bytea)
RETURNS TABLE (id integer, tenant text, scopes text[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH t AS (
    SELECT a.id, a.tenant, a.scopes, a.last_used_at FROM :SCHEMA.api_tokens a
    WHERE a.token_hash = p_hash AND a.revoked_at IS NULL),
  touched AS (  -- its use noted at most once a minute: busy clients do not write on every request
    UPDATE :SCHEMA.api_tokens a SET last_used_at = now() FROM t
    WHERE a.id = t.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'))
  SELECT t.id, t.tenant, t.scopes FROM t;
END $$;
