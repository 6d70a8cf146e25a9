-- Tenant rate limits: at most rate_limit job starts (claims) per window of rate_per_ms,
-- across all workers, composing with slots. Windows are aligned on the epoch (window k
-- is [k * per, (k + 1) * per) ms), so every process agrees on them. A rate-limited
-- tenant is claimed like a tenant with slots: under its row lock, which serializes its
-- claims, and its starts are counted on its row in the same transaction (rate_window,
-- rate_used): exact, with no counter shared with other tenants. A tenant out of starts
-- is filtered out before any lock is taken, so it holds back no one. Tenants without a
-- rate limit take the same paths as before (measured back to back with the previous
-- claim_jobs on the shared 2-core machine: fairness --quick 1.14 -> 1.22 ms a claim at
-- A=1 000, scaling --quick 7.4/7.1 -> 7.2/7.7 ms, drain 26-28k -> 28-31k jobs/s: noise).

ALTER TABLE :SCHEMA.tenants
  ADD COLUMN rate_limit integer CHECK (rate_limit > 0),
  ADD COLUMN rate_per_ms bigint CHECK (rate_per_ms > 0),
  ADD COLUMN rate_window bigint NOT NULL DEFAULT 0,     -- the window rate_used counts in
  ADD COLUMN rate_used integer NOT NULL DEFAULT 0,      -- starts in that window
  ADD CONSTRAINT tenants_rate CHECK ((rate_limit IS NULL) = (rate_per_ms IS NULL));

-- Rate-limited tenants, for the workers' wake-up at the next window.
CREATE INDEX tenants_rated ON :SCHEMA.tenants (tenant) WHERE rate_limit IS NOT NULL;

-- The window that time p_at falls in, for windows of p_per_ms.
CREATE FUNCTION :SCHEMA.rate_window(p_per_ms bigint, p_at timestamptz)
RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT floor(extract(epoch FROM p_at) * 1000 / p_per_ms)::bigint
$$;

-- Starts a tenant has left in the window of p_at; a large number without a rate limit.
CREATE FUNCTION :SCHEMA.rate_left(p_tenant :SCHEMA.tenants, p_at timestamptz)
RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN p_tenant.rate_limit IS NULL THEN 2147483647
    WHEN p_tenant.rate_window >= :SCHEMA.rate_window(p_tenant.rate_per_ms, p_at)
      THEN greatest(0, p_tenant.rate_limit - p_tenant.rate_used)
    ELSE p_tenant.rate_limit
  END
$$;

-- Sets (or with p_limit NULL removes) a tenant's rate limit. Waits for claims in flight
-- that treat the tenant as unlimited, like set_tenant.
CREATE FUNCTION :SCHEMA.set_tenant_rate(p_tenant text, p_limit integer, p_per_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.tenant_lock_space(), hashtext(p_tenant));
  INSERT INTO :SCHEMA.tenants AS t (tenant, rate_limit, rate_per_ms)
  VALUES (p_tenant, p_limit, CASE WHEN p_limit IS NULL THEN NULL ELSE p_per_ms END)
  ON CONFLICT (tenant) DO UPDATE SET rate_limit = excluded.rate_limit, rate_per_ms = excluded.rate_per_ms;
  PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
END $$;

-- When a worker should look again: the next scheduled job or retry, or the next window
-- of a rate-limited tenant that has used up the current one. NULL if nothing is due.
CREATE FUNCTION :SCHEMA.next_due_at()
RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT least(
    (SELECT min(j.run_at) FROM :SCHEMA.jobs j WHERE j.state IN ('scheduled', 'failed')),
    (SELECT to_timestamp(min((t.rate_window + 1) * t.rate_per_ms) / 1000.0) FROM :SCHEMA.tenants t
     WHERE t.rate_limit IS NOT NULL AND t.rate_used >= t.rate_limit
       AND t.rate_window >= :SCHEMA.rate_window(t.rate_per_ms, now())))
$$;

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
  -- in a crash, the jobs are simply available again with their old attempt number (a
  -- completion of the lost claim is then fenced out). Enqueues and completions keep
  -- synchronous commits; a caller's own transaction is left alone (the default).
  IF p_async_commit THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  v_lanes := :SCHEMA.ready_lanes(p_queues, p_tenant);
  IF v_lanes IS NULL THEN RETURN; END IF;
  SELECT array_agg(DISTINCT l.tenant) INTO v_candidates FROM unnest(v_lanes) l;

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
             CASE WHEN l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
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
      WHERE NOT n.shared
      UNION ALL
      -- unlimited tenants: claims run in parallel, so lock the jobs (SKIP LOCKED)
      SELECT p.id, p.tid, p.priority, n.tenant, n.concurrency_key, n.free, NULL, n.last_served_at
      FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND j.concurrency_key = n.concurrency_key
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
