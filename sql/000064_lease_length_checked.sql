-- extend_lease() and working() refuse a lease length under 1 ms.
--
-- extend_lease(id, token, 0) or working(id, token, -5) set the lease's end to now or to
-- the past: the next upkeep took the job back from a worker still on it (the attempt
-- counted) and leased it again, while the caller read a lease end as if the lease were
-- kept. fetch_jobs refuses such a lease (000063); these now do too, with the argument
-- named, before anything is written: the lease runs on as it was. A NULL length is
-- refused as before (000048, 000060). The library and the HTTP API already refused them.
-- The bodies are 000056's (extend_lease) and 000060's (working) but for this check, which
-- both make through check_lease_ms.

-- Refuses a lease's new length that is NULL or under 1 ms, naming the argument `ms`.
CREATE OR REPLACE FUNCTION :SCHEMA.check_lease_ms(p_ms integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_ms IS NULL THEN
    PERFORM :SCHEMA.arg_refuse('ms', 'must be given (the lease''s new length in milliseconds)');
  END IF;
  IF p_ms < 1 THEN
    PERFORM :SCHEMA.arg_refuse('ms', format('must be a lease length in milliseconds, 1 or more (got %s)', p_ms));
  END IF;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_until timestamptz;
BEGIN
  PERFORM :SCHEMA.check_lease_ms(p_ms);
  UPDATE :SCHEMA.jobs SET lease_until = clock_timestamp() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until INTO v_until;
  RETURN v_until;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.working(
  p_id bigint,
  p_token bigint,
  p_ms integer,
  OUT lease_until timestamptz,
  OUT cancel_requested boolean
) LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM :SCHEMA.check_lease_ms(p_ms);
  UPDATE :SCHEMA.jobs j SET lease_until = clock_timestamp() + p_ms * interval '1 millisecond'
  WHERE j.id = p_id AND j.lease_token = p_token AND j.state = 'running'
  RETURNING j.lease_until, j.cancel_requested INTO working.lease_until, working.cancel_requested;
END $$;
