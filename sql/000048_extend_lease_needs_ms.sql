-- extend_lease() refuses a NULL duration.
--
-- extend_lease(id, token, NULL) set the job's lease_until to NULL and returned NULL, which
-- its caller reads as "lease lost"; the job then stayed running for good, held by no
-- worker: the upkeep gives back a lease that ran out (lease_until < now()) or a dead
-- worker's jobs, and a NULL lease is neither. The worker role can make this call. Now a
-- NULL duration is refused (SQLSTATE 22023, as the SQL API's other bad arguments) and
-- the lease is left as it was.

CREATE OR REPLACE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_until timestamptz;
BEGIN
  IF p_ms IS NULL THEN
    PERFORM :SCHEMA.arg_refuse('ms', 'must be given (the lease''s new length in milliseconds)');
  END IF;
  UPDATE :SCHEMA.jobs SET lease_until = now() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until INTO v_until;
  RETURN v_until;
END $$;
