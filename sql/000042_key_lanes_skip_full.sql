-- A tenant's key lanes leave out the keys at their per-key limit.
--
-- A tenant with a per-key limit is read key by key, at most config.key_lanes keys of a
-- queue per claim, in key order. The window counted keys already at their limit, which
-- yield nothing: while the first keys kept a backlog and a running job each, the keys
-- after them never ran, free slots or not (key_lanes 2, per-key 1, keys a, b and c with
-- two jobs each: the second claim took nothing, and c waited for a or b to drain).
--
-- The keys at their limit are read once a claim, from the running counts (one entry per
-- running key of the tenant: never more than its running jobs), and skipped in the walk.
-- The body is that of 000033 but for that.

CREATE OR REPLACE FUNCTION :SCHEMA.key_lanes(p_queue text, p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_full text[];
BEGIN
  SELECT coalesce(array_agg(x.ckey), '{}') INTO v_full FROM (
    SELECT r.ckey FROM (
      SELECT b.ckey, b.n FROM :SCHEMA.running_base b WHERE b.tenant = p_tenant AND b.ckey <> ''
      UNION ALL
      SELECT d.ckey, d.n FROM :SCHEMA.running_deltas d
      WHERE d.tenant = p_tenant AND d.ckey <> ''
        AND d.seq > (SELECT f.upto FROM :SCHEMA.running_fold f WHERE f.one)
    ) r
    GROUP BY r.ckey
    HAVING sum(r.n) >= (SELECT t.per_key FROM :SCHEMA.tenants t WHERE t.tenant = p_tenant)
  ) x;
  RETURN (
    WITH RECURSIVE k AS (
      (SELECT j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = p_queue AND j.tenant = p_tenant
        ORDER BY j.concurrency_key LIMIT 1)
      UNION ALL
      SELECT n.concurrency_key FROM k CROSS JOIN LATERAL (
        SELECT j.concurrency_key FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = p_queue AND j.tenant = p_tenant
          AND j.concurrency_key > k.concurrency_key
        ORDER BY j.concurrency_key LIMIT 1) n
    )
    SELECT array_agg(ROW(p_queue, p_tenant, k.concurrency_key):::SCHEMA.lane)
    FROM (SELECT * FROM k WHERE k.concurrency_key <> ALL (v_full)
          LIMIT (SELECT c.key_lanes FROM :SCHEMA.config c WHERE c.singleton)) k);
END $$;
