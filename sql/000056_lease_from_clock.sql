-- A lease runs from when it is taken, not from when its transaction began.
--
-- claim_jobs (fetch_jobs) and extend_lease set lease_until = now() + the lease, now() being
-- the transaction's start. A consumer fetching or extending in a transaction that had been
-- open a while (other work, a lock wait) got a lease shorter by that long, or one already
-- over when handed out: after 3 s, a 2 s lease had ended a second before it was returned,
-- extend_lease could not move it past the transaction's start plus 2 s, and the first
-- upkeep after the commit gave the job to another consumer (started_at, read from the
-- clock, was after lease_until). Now both count from the clock: the claim from v_now, the
-- time it read after its locks and records as started_at; extend_lease from
-- clock_timestamp(). The heartbeat is left: workers send it alone, outside any transaction.
-- The bodies are 000053's (claim_jobs) and 000048's (extend_lease) but for that.

CREATE OR REPLACE FUNCTION :SCHEMA.claim_jobs(
  p_worker integer,
  p_limit integer,
  p_lease_ms integer,
  p_queues text[] DEFAULT NULL,
  p_tenant text DEFAULT NULL,
  p_max_tenants integer DEFAULT 64,
  p_async_commit boolean DEFAULT false
) RETURNS SETOF :SCHEMA.jobs LANGUAGE plpgsql
SET jit = off
SET plan_cache_mode = force_generic_plan
SET max_parallel_workers_per_gather = 0
AS $$
DECLARE
  v_pairs :SCHEMA.lane[];
  v_lanes :SCHEMA.lane[];
  v_candidates text[];
  v_exclusive text[];
  v_shared text[];
  v_ids bigint[];
  v_tids tid[];
  v_mark_queues text[];
  v_mark_tenants text[];
  v_mark_priorities smallint[];
  v_mark_ids bigint[];
  v_mark_snaps pg_snapshot[];
  v_queues text[];
  v_tenants text[];
  v_priorities smallint[];
  v_default integer;
  v_space integer := :SCHEMA.tenant_lock_space();
  v_now timestamptz;
  v_left integer := p_limit;
  v_share integer;
  v_full text[];
  -- after a round that took nothing from limited tenants it chose: how many of them the
  -- next round may choose, such rounds so far, and the limited tenants they passed over
  v_pick integer;
  v_empty integer := 0;
  v_passed text[] := '{}';
BEGIN
  PERFORM :SCHEMA.need_read_committed('claim_jobs');
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

  -- Rounds: each tenant chosen takes at most its share of what is left (`share`, below);
  -- another round follows, among the tenants that took their whole share (v_full), only
  -- when there are some: they may have more. A round that takes nothing from the tenants
  -- it chose (their keys at their limit, their jobs expired or held by other claims) goes
  -- on with the candidates it left out. After one that chose limited tenants, the next may
  -- choose up to p_max_tenants of them, three such rounds at most, and the ones passed over
  -- are served (moved back) with the first jobs the claim takes. Unlimited tenants are
  -- chosen as many as there is room for, as ever: one of them is empty only while other
  -- claims hold its jobs, and choosing more would lock a job in each. Each round takes at
  -- least one job, or leaves out at least one tenant, or ends.
  LOOP
    -- 1a. Limited tenants that look eligible (not paused, a slot free and starts left in
    --     the rate window by this snapshot, and, with a per-key limit, a key with work
    --     below its limit): lock their rows, least recently served first. Full tenants are
    --     filtered out before the LIMIT, so they cannot crowd out tenants with room, and
    --     are not locked, so they hold back no other claim.
    SELECT coalesce(array_agg(e.tenant), '{}') INTO v_exclusive FROM (
      SELECT t.tenant FROM :SCHEMA.tenants t
      WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
        AND (t.per_key IS NOT NULL OR coalesce(t.slots, v_default) IS NOT NULL OR t.rate_limit IS NOT NULL)
        AND :SCHEMA.rate_left(t, clock_timestamp()) > 0
        AND (coalesce(t.slots, v_default) IS NULL
             OR coalesce(t.slots, v_default) > :SCHEMA.running_now(t.tenant, ''))
        AND (t.per_key IS NULL
             OR EXISTS (SELECT 1 FROM unnest(v_pairs) p
                        WHERE p.tenant = t.tenant AND :SCHEMA.key_lanes(p.queue, p.tenant, 1) IS NOT NULL))
      ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
      LIMIT least(p_max_tenants, coalesce(v_pick, v_left))
      FOR UPDATE OF t SKIP LOCKED
    ) e;

    -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
    SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
      SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
      WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
        AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
      ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
      LIMIT least(p_max_tenants, v_left)
    ) u
    WHERE pg_try_advisory_xact_lock_shared(v_space, hashtext(u.tenant))
      AND (u.slots IS NOT NULL OR pg_try_advisory_xact_lock_shared(v_space, 0));
    IF cardinality(v_exclusive) + cardinality(v_shared) = 0 THEN RETURN; END IF;

    -- The lanes of the chosen tenants: a (queue, tenant) pair read in (priority, id) order
    -- across its keys, or, for a tenant with a per-key limit, one lane per key: the keys of
    -- its first jobs, as many as this claim can take (key_window).
    SELECT array_agg(x.l) INTO v_lanes FROM (
      SELECT p AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
      WHERE t.per_key IS NULL AND (p.tenant = ANY (v_exclusive) OR p.tenant = ANY (v_shared))
      UNION ALL
      SELECT k AS l FROM unnest(v_pairs) p JOIN :SCHEMA.tenants t ON t.tenant = p.tenant
      CROSS JOIN LATERAL unnest(:SCHEMA.key_window(p.queue, p.tenant, v_left)) k
      WHERE t.per_key IS NOT NULL AND p.tenant = ANY (v_exclusive)
    ) x;

    -- 2. With those locks held, a fresh snapshot: count running jobs of limited tenants
    --    exactly, and the starts left in their rate window (at v_now, read after the locks:
    --    claims of a tenant are serialized by its lock, so their v_now only grows and each
    --    start is counted in the window it falls in), re-check that the shared ones are
    --    still unlimited, and choose the jobs in round-robin order (none without lanes).
    v_now := clock_timestamp();
    WITH elig AS MATERIALIZED (  -- MATERIALIZED: computed once, not once per picked row
      SELECT t.tenant, :SCHEMA.served_at(t.tenant) AS last_served_at, t.per_key,
             t.tenant = ANY (v_shared) AS shared,
             least(:SCHEMA.rate_left(t, v_now),
               CASE WHEN lim.n IS NULL THEN v_left
                    ELSE least(v_left, lim.n - :SCHEMA.running_now(t.tenant, '')) END) AS free
      FROM :SCHEMA.tenants t
      CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
      WHERE t.tenant = ANY (v_exclusive)
         OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
             AND NOT t.paused)
    ),
    -- A tenant's share of the batch: the level s at which the tenants' free slots, each
    -- capped at s, add up to what is left (water-filling: tenants with fewer free slots
    -- take them all, the others s each). Round-robin by job takes no more than s from a
    -- tenant while every other one has jobs. Locking (or reading) more, up to the whole
    -- batch in every lane, was wasted: with 4 busy tenants a claim locked 4 jobs for each
    -- it took, and a parallel claim walked past those (SKIP LOCKED) and could not mark
    -- past them. A tenant with fewer jobs than its share leaves the rest to another round.
    fill AS (
      SELECT e.free, row_number() OVER w AS k, count(*) OVER () AS t,
             coalesce(sum(e.free) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS below
      FROM elig e WHERE e.free > 0
      WINDOW w AS (ORDER BY e.free, e.tenant)
    ),
    share AS MATERIALIZED (
      SELECT coalesce((SELECT ceil((v_left - f.below)::numeric / (f.t - f.k + 1))::integer FROM fill f
                       WHERE f.below + (f.t - f.k + 1) * f.free >= v_left ORDER BY f.k LIMIT 1),
                      v_left) AS n
    ),
    -- the running jobs of the chosen per-key tenants' keys, read once (not once per key lane;
    -- nothing is read when no per-key tenant was chosen)
    keys_running AS MATERIALIZED (
      SELECT e.tenant, r.ckey, sum(r.n)::integer AS n
      FROM elig e CROSS JOIN LATERAL (
        SELECT b.ckey, b.n FROM :SCHEMA.running_base b WHERE b.tenant = e.tenant AND b.ckey <> ''
        UNION ALL
        SELECT d.ckey, d.n FROM :SCHEMA.running_deltas d
        WHERE d.tenant = e.tenant AND d.ckey <> ''
          AND d.seq > (SELECT f.upto FROM :SCHEMA.running_fold f WHERE f.one)
      ) r
      WHERE e.per_key IS NOT NULL
      GROUP BY e.tenant, r.ckey
    ),
    -- a pair lane's mark (key lanes have none: the condition keeps lane_mark from running)
    lanes AS MATERIALIZED (
      SELECT l.queue, l.tenant, l.concurrency_key, e.free, sh.n AS share, e.last_served_at, e.shared,
             CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                  ELSE e.per_key - coalesce(kr.n, 0) END AS key_free,
             m.priority AS m_priority, m.id AS m_id, m.snap AS m_snap
      FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant CROSS JOIN share sh
      LEFT JOIN keys_running kr ON kr.tenant = l.tenant AND kr.ckey = l.concurrency_key
      LEFT JOIN LATERAL (
        SELECT lm.priority, lm.id, lm.snap FROM :SCHEMA.lane_mark(l.queue, l.tenant) lm
        WHERE l.concurrency_key IS NULL
        OFFSET 0  -- kept a subquery: pulled up, its condition ran after lane_mark, not before
      ) m ON true
      WHERE e.free > 0
    ),
    arr AS MATERIALIZED (
      SELECT a.* FROM :SCHEMA.arrivals_behind(
        ARRAY(SELECT n.queue FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.tenant FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_priority FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_id FROM lanes n WHERE n.concurrency_key IS NULL),
        ARRAY(SELECT n.m_snap FROM lanes n WHERE n.concurrency_key IS NULL)) a
    ),
    -- Limited tenants' pair lanes (their claims are serialized by the tenant's row lock):
    -- the first jobs in lane order, the arrivals before the mark and the jobs after it.
    cands AS MATERIALIZED (
      SELECT n.queue, n.tenant, x.id, x.tid, x.priority
      FROM lanes n CROSS JOIN LATERAL (
        SELECT y.* FROM (
          (SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
           WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
             AND (j.priority, j.id) > (n.m_priority, n.m_id)
             AND (j.expires_at IS NULL OR j.expires_at > now())
           ORDER BY j.priority, j.id
           LIMIT least(n.free, n.share))
          UNION ALL
          SELECT a.id, a.tid, a.priority FROM arr a
          WHERE a.queue = n.queue AND a.tenant = n.tenant
            AND (a.expires_at IS NULL OR a.expires_at > now())
        ) y
        ORDER BY y.priority, y.id
        LIMIT least(n.free, n.share)
      ) x
      WHERE NOT n.shared AND n.concurrency_key IS NULL
    ),
    -- Unlimited tenants' lanes are claimed in parallel: their jobs are locked (SKIP LOCKED),
    -- first the arrivals before the mark (they come first in lane order), then from the mark
    -- on, as far as it takes. MATERIALIZED: the locking runs once per lane.
    early AS MATERIALIZED (
      SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.ctid = ANY (ARRAY(
                SELECT a.tid FROM arr a
                WHERE a.queue = n.queue AND a.tenant = n.tenant
                  AND (a.expires_at IS NULL OR a.expires_at > now())))
          AND j.state IS NOT DISTINCT FROM 'available'  -- see the claim below
        ORDER BY j.priority, j.id
        LIMIT least(n.free, n.share)
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    late AS MATERIALIZED (
      SELECT n.queue, n.tenant, p.id, p.tid, p.priority FROM lanes n CROSS JOIN LATERAL (
        SELECT j.id, j.ctid AS tid, j.priority FROM :SCHEMA.jobs j
        WHERE j.state = 'available' AND j.queue = n.queue AND j.tenant = n.tenant
          AND (j.priority, j.id) > (n.m_priority, n.m_id)
          AND (j.expires_at IS NULL OR j.expires_at > now())
        ORDER BY j.priority, j.id
        LIMIT least(n.free, n.share) - (SELECT count(*) FROM early e WHERE e.queue = n.queue AND e.tenant = n.tenant)
        FOR UPDATE OF j SKIP LOCKED
      ) p
      WHERE n.shared
    ),
    locked AS (
      SELECT e.* FROM early e UNION ALL SELECT l.* FROM late l
    ),
    picked AS (
      -- key lanes of limited tenants: no row locks, since no other claim can pick their jobs
      SELECT p.id, p.tid, p.priority, n.queue, n.tenant, n.concurrency_key, n.free, n.key_free,
             n.last_served_at
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
      -- limited tenants without a per-key limit: the pair's candidates, no row locks either
      SELECT c.id, c.tid, c.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
             n.last_served_at
      FROM lanes n JOIN cands c ON c.queue = n.queue AND c.tenant = n.tenant
      WHERE NOT n.shared AND n.concurrency_key IS NULL
      UNION ALL
      -- unlimited tenants: what this claim locked
      SELECT k.id, k.tid, k.priority, n.queue, n.tenant, n.concurrency_key, n.free, NULL,
             n.last_served_at
      FROM locked k
      JOIN lanes n ON n.queue = k.queue AND n.tenant = k.tenant AND n.concurrency_key IS NULL
    ),
    keyed AS (  -- a key's lanes in several queues share its limit
      SELECT p.*, row_number() OVER (PARTITION BY p.tenant, p.concurrency_key ORDER BY p.priority, p.id) AS rk
      FROM picked p
    ),
    ranked AS (
      SELECT k.id, k.tid, k.queue, k.tenant, k.priority, k.free, k.last_served_at,
             row_number() OVER (PARTITION BY k.tenant ORDER BY k.priority, k.id) AS rn
      FROM keyed k WHERE k.key_free IS NULL OR k.rk <= k.key_free
    ),
    chosen AS MATERIALIZED (
      SELECT r.* FROM ranked r WHERE r.rn <= least(r.free, (SELECT s.n FROM share s))
      ORDER BY r.rn, r.last_served_at, r.tenant
      LIMIT v_left
    )
    -- the chosen jobs, each array in the same order (step 4 zips them), and the old marks
    -- of the pair lanes chosen from, for the new marks of step 4
    SELECT c.ids, c.tids, c.queues, c.tenants, c.priorities,
           m.queues, m.tenants, m.priorities, m.ids, m.snaps, (SELECT s.n FROM share s)
    FROM (SELECT coalesce(array_agg(h.id ORDER BY h.rn, h.last_served_at, h.tenant), '{}') AS ids,
                 array_agg(h.tid ORDER BY h.rn, h.last_served_at, h.tenant) AS tids,
                 array_agg(h.queue ORDER BY h.rn, h.last_served_at, h.tenant) AS queues,
                 array_agg(h.tenant ORDER BY h.rn, h.last_served_at, h.tenant) AS tenants,
                 array_agg(h.priority ORDER BY h.rn, h.last_served_at, h.tenant) AS priorities
          FROM chosen h) c,
         (SELECT array_agg(n.queue) AS queues, array_agg(n.tenant) AS tenants,
                 array_agg(n.m_priority) AS priorities, array_agg(n.m_id) AS ids, array_agg(n.m_snap) AS snaps
          FROM lanes n
          WHERE n.concurrency_key IS NULL
            AND EXISTS (SELECT 1 FROM chosen h WHERE h.queue = n.queue AND h.tenant = n.tenant)) m
    INTO v_ids, v_tids, v_queues, v_tenants, v_priorities,
         v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps, v_share;
    IF cardinality(v_ids) = 0 THEN
      v_candidates := ARRAY(SELECT c FROM unnest(v_candidates) c WHERE c <> ALL (v_exclusive || v_shared));
      v_passed := v_passed || v_exclusive;
      EXIT WHEN cardinality(v_candidates) = 0;
      IF cardinality(v_exclusive) > 0 THEN
        v_empty := v_empty + 1;
        EXIT WHEN v_empty >= 3;
        v_pick := p_max_tenants;
      END IF;
      CONTINUE;
    END IF;

    -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
    --    expired) has moved or is no longer available, and is left out. A rate-limited
    --    tenant's row is locked by this claim, so its starts are always counted.
    RETURN QUERY
    WITH claimed AS (
      UPDATE :SCHEMA.jobs j
      SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
          lease_token = nextval(':SCHEMA.lease_tokens'),
          started_at = v_now, lease_until = v_now + p_lease_ms * interval '1 millisecond'
      -- IS NOT DISTINCT FROM: the same test (state is never null), but one that no partial
      -- index on `state = 'available'` matches, so the plan is a TID scan and not a whole
      -- scan of such an index, dead entries and all
      WHERE j.ctid = ANY (v_tids) AND j.state IS NOT DISTINCT FROM 'available'
      RETURNING j.*
    ),
    -- the limited tenants passed over by an empty round are served too: the next claims
    -- choose the others first. Not a tenant without a limit: it may have been empty only
    -- because another claim held its jobs, and that claim may not serve it.
    served AS (
      INSERT INTO :SCHEMA.tenant_serves (tenant)
      SELECT DISTINCT c.tenant FROM claimed c
      UNION
      SELECT p.tenant FROM unnest(v_passed) p(tenant) WHERE EXISTS (SELECT 1 FROM claimed)
    ),
    rated AS (
      UPDATE :SCHEMA.tenants t SET
        rate_window = :SCHEMA.rate_window(t.rate_per_ms, v_now),
        rate_used = n.n + t.rate_limit - :SCHEMA.rate_left(t, v_now)
      FROM (SELECT c.tenant, count(*)::integer AS n FROM claimed c GROUP BY c.tenant) n
      WHERE t.tenant = n.tenant AND t.rate_limit IS NOT NULL
    )
    SELECT c.* FROM claimed c JOIN unnest(v_ids) WITH ORDINALITY AS o(id, ord) ON o.id = c.id
    ORDER BY o.ord;

    -- 4. The lanes' new marks, under a snapshot that sees this claim's own updates: a mark
    --    is valid when no job available in its snapshot sits at or before its position.
    --    Before the old mark, only arrivals since the old mark's snapshot can (none must be
    --    left); after it, the mark goes to the furthest job this claim took before the
    --    first job still available there — one a parallel claim holds (it may yet roll
    --    back), one committed late, or the next in line.
    -- the arrivals behind the old marks, read once for all the lanes
    WITH arr AS MATERIALIZED (
      SELECT a.* FROM :SCHEMA.arrivals_behind(
        v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps) a
    )
    INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap)
    SELECT l.queue, l.tenant, p.priority, p.id, :SCHEMA.look_snapshot()
    FROM unnest(v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids)
         AS l(queue, tenant, priority, id)
    LEFT JOIN LATERAL (
      SELECT j.priority, j.id FROM :SCHEMA.jobs j
      WHERE j.state = 'available' AND j.queue = l.queue AND j.tenant = l.tenant
        AND (j.priority, j.id) > (l.priority, l.id) AND (j.expires_at IS NULL OR j.expires_at > now())
      ORDER BY j.priority, j.id
      LIMIT 1
    ) f ON true
    CROSS JOIN LATERAL (
      SELECT c.priority, c.id FROM unnest(v_ids, v_queues, v_tenants, v_priorities) AS c(id, queue, tenant, priority)
      WHERE c.queue = l.queue AND c.tenant = l.tenant AND (c.priority, c.id) > (l.priority, l.id)
        AND (f.id IS NULL OR (c.priority, c.id) < (f.priority, f.id))
      ORDER BY c.priority DESC, c.id DESC
      LIMIT 1
    ) p
    WHERE NOT EXISTS (
      SELECT 1 FROM arr a
      WHERE a.queue = l.queue AND a.tenant = l.tenant
        AND (a.expires_at IS NULL OR a.expires_at > now()));

    v_left := v_left - cardinality(v_ids);
    v_passed := '{}';
    v_pick := NULL;
    SELECT array_agg(c.t) INTO v_full FROM (
      SELECT t FROM unnest(v_tenants) t GROUP BY t HAVING count(*) >= v_share) c;
    EXIT WHEN v_left <= 0 OR v_full IS NULL;
    v_candidates := v_full;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.extend_lease(p_id bigint, p_token bigint, p_ms integer)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_until timestamptz;
BEGIN
  IF p_ms IS NULL THEN
    PERFORM :SCHEMA.arg_refuse('ms', 'must be given (the lease''s new length in milliseconds)');
  END IF;
  UPDATE :SCHEMA.jobs SET lease_until = clock_timestamp() + p_ms * interval '1 millisecond'
  WHERE id = p_id AND lease_token = p_token AND state = 'running'
  RETURNING lease_until INTO v_until;
  RETURN v_until;
END $$;
