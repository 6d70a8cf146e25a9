-- Claims whose cost does not depend on other tenants' lanes.
--
-- The claim found its lanes (queue, tenant, concurrency key) by walking every distinct
-- lane with work: one tenant enqueueing 150 000 jobs with distinct concurrency keys made
-- every other tenant's fetch of one job take 1.5-2.4 s. Now it finds the (queue, tenant)
-- pairs with work (one index descent each, however many keys), chooses its tenants, and
-- only then reads their jobs: in (priority, id) order across all keys for a tenant
-- without a per-key limit (keys do not matter to it), or per key for a tenant with one —
-- at most config.key_lanes keys (default 1 000) of a pair per claim, in key order.
-- Beyond that window a tenant's keys wait their turn (FIFO holds among the keys in the
-- window); the window bounds what a tenant flooding keys costs its own claims.

CREATE INDEX jobs_ready_pair ON :SCHEMA.jobs (queue, tenant, priority, id) WHERE state = 'available';
ALTER TABLE :SCHEMA.config ADD COLUMN key_lanes integer NOT NULL DEFAULT 1000 CHECK (key_lanes > 0);

-- The (queue, tenant) pairs with available jobs, as lanes with no key: a loose index scan,
-- one descent per pair.
CREATE FUNCTION :SCHEMA.ready_pairs(p_queues text[], p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_queues text[] := p_queues;
  v_all :SCHEMA.lane[];
BEGIN
  IF v_queues IS NULL THEN
    -- the queues with work: one descent each
    WITH RECURSIVE q AS (
      (SELECT j.queue FROM :SCHEMA.jobs j WHERE j.state = 'available' ORDER BY j.queue LIMIT 1)
      UNION ALL
      SELECT n.queue FROM q CROSS JOIN LATERAL (
        SELECT j.queue FROM :SCHEMA.jobs j WHERE j.state = 'available' AND j.queue > q.queue
        ORDER BY j.queue LIMIT 1) n
    )
    SELECT array_agg(q.queue) INTO v_queues FROM q;
    IF v_queues IS NULL THEN RETURN NULL; END IF;
  END IF;
  IF p_tenant IS NOT NULL THEN
    SELECT array_agg(ROW(q.queue, p_tenant, NULL):::SCHEMA.lane) INTO v_all
    FROM unnest(v_queues) q(queue)
    WHERE EXISTS (SELECT 1 FROM :SCHEMA.jobs j
                  WHERE j.state = 'available' AND j.queue = q.queue AND j.tenant = p_tenant);
    RETURN v_all;
  END IF;
  SELECT array_agg(ROW(q.queue, t.tenant, NULL):::SCHEMA.lane) INTO v_all
  FROM unnest(v_queues) q(queue) CROSS JOIN LATERAL (
    WITH RECURSIVE t AS (
      (SELECT j.tenant FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = q.queue ORDER BY j.tenant LIMIT 1)
      UNION ALL
      SELECT n.tenant FROM t CROSS JOIN LATERAL (
        SELECT j.tenant FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = q.queue AND j.tenant > t.tenant
        ORDER BY j.tenant LIMIT 1) n
    )
    SELECT t.tenant FROM t) t;
  RETURN v_all;
END $$;

-- The keys with available jobs of one (queue, tenant) pair, as lanes: the first
-- config.key_lanes of them in key order, one index descent each.
CREATE FUNCTION :SCHEMA.key_lanes(p_queue text, p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE sql STABLE AS $$
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
  FROM (SELECT * FROM k LIMIT (SELECT c.key_lanes FROM :SCHEMA.config c)) k
$$;

-- As in 000013, with the tenants chosen before their lanes are read.
CREATE OR REPLACE FUNCTION :SCHEMA.claim_jobs(
  p_worker integer,
  p_limit integer,
  p_lease_ms integer,
  p_queues text[] DEFAULT NULL,
  p_tenant text DEFAULT NULL,
  p_max_tenants integer DEFAULT 64,
  p_async_commit boolean DEFAULT false
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
-- Row estimates of unnest() make these plans look expensive: JIT would cost ~0.5 s a
-- call, and plpgsql would build a fresh custom plan on every call. Their cost does not
-- depend on the parameters' values, so one generic plan per session serves.
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  v_pairs :SCHEMA.lane[];
  v_lanes :SCHEMA.lane[];
  v_candidates text[];
  v_exclusive text[];
  v_shared text[];
  v_ids bigint[];
  v_tids tid[];
  v_default integer;
  v_space integer := :SCHEMA.tenant_lock_space();
  v_now timestamptz;
BEGIN
  IF p_limit <= 0 THEN RETURN; END IF;
  -- A worker's claim (its own transaction) need not wait for its WAL to reach disk: lost
  -- in a crash, the jobs are simply available again (a completion of the lost claim is
  -- fenced out: its token is never handed out again). Enqueues and completions keep
  -- synchronous commits; a caller's own transaction is left alone (the default).
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- (queue, tenant) pairs with work: what other tenants have waiting, however many
  -- concurrency keys, costs nothing here
  v_pairs := :SCHEMA.ready_pairs(p_queues, p_tenant);
  IF v_pairs IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT l.tenant) INTO v_candidates FROM unnest(v_pairs) l;

  -- Tenants first seen in jobs (SQL inserts, new tenants) get their row here, not at
  -- enqueue, so enqueue never takes a lock a caller's transaction would hold.
  INSERT INTO :SCHEMA.tenants (tenant)
  SELECT c.tenant FROM unnest(v_candidates) c(tenant)
  WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.tenants t WHERE t.tenant = c.tenant)
  ON CONFLICT DO NOTHING;
  SELECT default_slots INTO v_default FROM :SCHEMA.config;

  -- 1a. Limited tenants that look eligible (not paused, a slot free and starts left in
  --     the rate window by this snapshot): lock their rows, least recently served first.
  --     Full tenants are filtered out before the LIMIT, so they cannot crowd out tenants
  --     with room, and are not locked, so they hold back no other claim.
  SELECT coalesce(array_agg(e.tenant), '{}') INTO v_exclusive FROM (
    SELECT t.tenant FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND (t.per_key IS NOT NULL OR coalesce(t.slots, v_default) IS NOT NULL OR t.rate_limit IS NOT NULL)
      AND :SCHEMA.rate_left(t, clock_timestamp()) > 0
      AND (coalesce(t.slots, v_default) IS NULL
           OR coalesce(t.slots, v_default) > (
             SELECT count(*) FROM :SCHEMA.jobs r WHERE r.state = 'running' AND r.tenant = t.tenant))
    ORDER BY t.last_served_at, t.tenant
    LIMIT least(p_max_tenants, p_limit)
    FOR UPDATE OF t SKIP LOCKED
  ) e;

  -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
  SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
    SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
    ORDER BY t.last_served_at, t.tenant
    LIMIT least(p_max_tenants, p_limit)
  ) u
  WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
    AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
  IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

  -- The lanes of the chosen tenants: a (queue, tenant) pair read in (priority, id) order
  -- across its keys, or, for a tenant with a per-key limit, one lane per key (at most
  -- config.key_lanes of them per pair, in key order).
  SELECT array_agg(x.l) INTO v_lanes FROM (
    SELECT p AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
    WHERE t.per_key IS NULL AND (p.tenant = ANY (v_exclusive) OR p.tenant = ANY (v_shared))
    UNION ALL
    SELECT k AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
    CROSS JOIN LATERAL unnest(:SCHEMA.key_lanes(p.queue, p.tenant)) k
    WHERE t.per_key IS NOT NULL AND p.tenant = ANY (v_exclusive)
  ) x;
  IF v_lanes IS NULL THEN RETURN; END IF;

  -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
  --    exactly, and the starts left in their rate window (at v_now, read after the locks:
  --    claims of a tenant are serialized by its lock, so their v_now only grows and each
  --    start is counted in the window it falls in), re-check that the shared ones are
  --    still unlimited, and choose the jobs in round-robin order.
  v_now := clock_timestamp();
  SELECT coalesce(array_agg(c.id ORDER BY c.rn, c.last_served_at, c.tenant), '{}'), array_agg(c.tid)
  INTO v_ids, v_tids FROM (
    -- MATERIALIZED: computed once, not once per picked row
    WITH elig AS MATERIALIZED (
      SELECT t.tenant, t.last_served_at, t.per_key, t.tenant = ANY (v_shared) AS shared,
             least(:SCHEMA.rate_left(t, v_now),
               CASE WHEN lim.n IS NULL THEN p_limit
                    ELSE least(p_limit, lim.n - (
                      SELECT count(*)::integer FROM :SCHEMA.jobs r
                      WHERE r.state = 'running' AND r.tenant = t.tenant)) END) AS free
      FROM :SCHEMA.tenants t
      CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
      WHERE t.tenant = ANY (v_exclusive)
         OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
             AND NOT t.paused)
    ),
    lanes AS MATERIALIZED (
      SELECT l.queue, l.tenant, l.concurrency_key, e.free, e.last_served_at, e.shared,
             CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                  ELSE e.per_key - (
                    SELECT count(*)::integer FROM :SCHEMA.jobs r
                    WHERE r.state = 'running' AND r.tenant = l.tenant
                      AND r.concurrency_key = l.concurrency_key) END AS key_free
      FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant
      WHERE e.free > 0
    ),
    picked AS (
      -- limited tenants: no row locks, since no other claim can pick their jobs
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, n.key_free, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND j.concurrency_key = n.concurrency_key
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT greatest(0, least(n.free, coalesce(n.key_free, n.free)))
      ) p
      WHERE NOT n.shared AND n.concurrency_key IS NOT NULL
      UNION ALL
      -- limited tenants without a per-key limit: the pair, every key, in (priority, id) order
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, NULL, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT n.free
      ) p
      WHERE NOT n.shared AND n.concurrency_key IS NULL
      UNION ALL
      -- unlimited tenants: claims run in parallel, so lock the jobs (SKIP LOCKED)
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, NULL, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT n.free
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    keyed AS (  -- a key's lanes in several queues share its limit
      SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.concurrency_key ORDER BY p.priority, p.id) AS rk
      FROM picked p
    ),
    ranked AS (
      SELECT k.id, k.tid, k.tenant, k.free, k.last_served_at,
             row_number() OVER (PARTITION BY k.tenant ORDER BY k.priority, k.id) AS rn
      FROM keyed k WHERE k.key_free IS NULL OR k.rk <= k.key_free
    )
    SELECT r.id, r.tid, r.rn, r.last_served_at, r.tenant FROM ranked r WHERE r.rn <= r.free
    ORDER BY r.rn, r.last_served_at, r.tenant
    LIMIT p_limit
  ) c;
  IF cardinality(v_ids) = 0 THEN RETURN; END IF;

  -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
  --    expired) has moved or is no longer available, and is left out. last_served_at of
  --    an unlimited tenant is updated only if no parallel claim is updating it already;
  --    a rate-limited tenant's row is locked by this claim, so its starts are always
  --    counted.
  RETURN QUERY
  WITH claimed AS (
    UPDATE :SCHEMA.jobs j
    SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
        lease_token = nextval(':SCHEMA.lease_tokens'),
        started_at = v_now, lease_until = now() + p_lease_ms * interval '1 millisecond'
    WHERE j.ctid = ANY (v_tids) AND j.state = 'available'
    RETURNING j.*
  ),
  served AS (
    UPDATE :SCHEMA.tenants t SET last_served_at = clock_timestamp(),
      rate_window = CASE WHEN t.rate_limit IS NULL THEN t.rate_window
                         ELSE :SCHEMA.rate_window(t.rate_per_ms, v_now) END,
      rate_used = CASE WHEN t.rate_limit IS NULL THEN t.rate_used
                       ELSE n.n + t.rate_limit - :SCHEMA.rate_left(t, v_now) END
    FROM (SELECT c.tenant, count(*)::integer AS n FROM claimed c GROUP BY c.tenant) n
    WHERE t.tenant = n.tenant AND t.tenant IN (
      SELECT s.tenant FROM :SCHEMA.tenants s
      WHERE s.tenant IN (SELECT c.tenant FROM claimed c)
      FOR NO KEY UPDATE SKIP LOCKED)
  )
  SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
  ORDER BY o.ord;
END $$;

DROP FUNCTION :SCHEMA.ready_lanes(text[], text);
