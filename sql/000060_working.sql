-- WORKING with the answer a consumer without a signal needs: whether a cancel was asked.
--
-- A Tusk worker hears a cancel from its heartbeat; a consumer in another language that
-- leases with fetch_jobs and keeps the lease with extend_lease had no way to hear it: the
-- worker role may read no table, and extend_lease returns the lease's end only. working()
-- extends the lease as extend_lease does (from the clock, fenced by the token) and returns,
-- in the same statement, the job's cancel_requested: one round trip, so a consumer that
-- extends every few seconds learns of a cancel within that. Both NULL when the lease is not
-- held any more (it ran out and was taken again, or the job ended).

CREATE FUNCTION :SCHEMA.working(
  p_id bigint,
  p_token bigint,
  p_ms integer,
  OUT lease_until timestamptz,
  OUT cancel_requested boolean
) LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF p_ms IS NULL THEN
    PERFORM :SCHEMA.arg_refuse('ms', 'must be given (the lease''s new length in milliseconds)');
  END IF;
  UPDATE :SCHEMA.jobs j SET lease_until = clock_timestamp() + p_ms * interval '1 millisecond'
  WHERE j.id = p_id AND j.lease_token = p_token AND j.state = 'running'
  RETURNING j.lease_until, j.cancel_requested INTO working.lease_until, working.cancel_requested;
END $$;

COMMENT ON FUNCTION :SCHEMA.working(bigint, bigint, integer) IS
'Keeps a leased job for p_ms more milliseconds from now (WORKING), fenced by its lease token, and says whether a cancel of the job was asked for (a consumer should stop, and nack or ack it). Both NULL when the lease is not held any more.';

REVOKE EXECUTE ON FUNCTION :SCHEMA.working(bigint, bigint, integer) FROM PUBLIC;
