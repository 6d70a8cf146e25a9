-- ack_job without a token settled any job that was not running.
--
-- ack_job (granted to the worker role: the lease API of SQL consumers) hands its token to
-- finish_jobs, where an outcome without a token is the path of the queue's own calls for a
-- job no lease holds. `ack_job(id, NULL)` therefore finished an available, delayed or
-- failed job as succeeded, with no lease and no run, and released its dependents. A lease
-- always has a token: without one, ack_job now settles nothing and returns false, as for
-- a lease that was lost. (nack_job and extend_lease match the token itself, so NULL
-- matches nothing there.)

CREATE OR REPLACE FUNCTION :SCHEMA.ack_job(p_id bigint, p_token bigint, p_result jsonb DEFAULT NULL)
RETURNS boolean LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE WHEN p_token IS NULL THEN false
    ELSE EXISTS (SELECT 1 FROM :SCHEMA.finish_jobs('succeeded',
      jsonb_build_array(jsonb_build_object('id', p_id, 'token', p_token, 'result', p_result))))
  END
$$;
