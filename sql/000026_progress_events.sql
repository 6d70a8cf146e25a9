-- Progress announced: set_progress says which running jobs' progress it wrote, on
-- <schema>:progress (their ids, at most 900 a notification), for the event stream
-- (GET /api/events, event `progress`). A worker writes a job's progress at most once a
-- heartbeat, so the announcements are bounded the same way. (000025 is left to another
-- change.)
CREATE OR REPLACE FUNCTION :SCHEMA.set_progress(p_ids bigint[], p_tokens bigint[], p_values jsonb[])
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
