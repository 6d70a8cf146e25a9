-- A heartbeat holds the jobs it renews for the worker that sends it.
--
-- A worker's id is its registration, held by a session-level lock on its listening
-- connection. When that connection is cut on the worker's side only (a half-open socket
-- after a NAT or load-balancer reset), the server keeps the old backend, and its lock,
-- until it notices; the worker, reconnecting, cannot take its old id and registers under
-- a new one. Its heartbeats went on renewing its running jobs by token, but the jobs kept
-- the old id in `locked_by`, and once the server dropped the old backend the upkeep took
-- that id for a dead worker's and gave its jobs back, lease or not: a second run began
-- while the first went on, until the worker's next heartbeat found the lease lost.
--
-- The heartbeat now sets `locked_by` to its worker on every job whose token it holds, at
-- its first beat under the new id (and renews the lease then, whatever is left of it).

CREATE OR REPLACE FUNCTION :SCHEMA.heartbeat(p_worker integer, p_ids bigint[], p_tokens bigint[], p_lease_ms integer)
RETURNS TABLE (alive boolean, cancelled bigint[], lost bigint[], lease_left_ms integer) LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
  v_alive boolean;
BEGIN
  UPDATE :SCHEMA.workers SET heartbeat_at = now() WHERE id = p_worker;
  v_alive := FOUND;
  UPDATE :SCHEMA.jobs j SET lease_until = now() + p_lease_ms * interval '1 millisecond',
    locked_by = coalesce(p_worker, j.locked_by)
  FROM unnest(p_ids, p_tokens) AS x(id, token)
  WHERE j.id = ANY (p_ids) AND j.id = x.id AND j.lease_token = x.token
    AND j.state IS NOT DISTINCT FROM 'running'
    AND (j.lease_until < now() + p_lease_ms * interval '0.5 millisecond'
         OR j.locked_by IS DISTINCT FROM coalesce(p_worker, j.locked_by));
  RETURN QUERY
  WITH held AS (
    SELECT j.lease_token, j.cancel_requested, j.lease_until
    FROM unnest(p_ids, p_tokens) AS x(id, token)
    JOIN :SCHEMA.jobs j ON j.id = x.id AND j.lease_token = x.token
    WHERE j.id = ANY (p_ids) AND j.state IS NOT DISTINCT FROM 'running'
  )
  SELECT v_alive,
    (SELECT coalesce(array_agg(h.lease_token), '{}') FROM held h WHERE h.cancel_requested),
    (SELECT coalesce(array_agg(x), '{}') FROM unnest(p_tokens) x
      WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.lease_token = x)),
    (SELECT :SCHEMA.capped_ms(now(), min(h.lease_until)) FROM held h);
END $$;
