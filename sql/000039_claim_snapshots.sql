-- The snapshot a claim's marks and looks record, and the isolation the claim needs.
--
-- 1. A mark (claim_jobs, and the upkeep's renewal in prune_lanes) and a look
--    (take_up_arrivals) record a snapshot, and a job is an arrival after it when the
--    transaction that made it available was running or not yet begun: `avail_xid >= xmax
--    OR avail_xid IN xip`. pg_current_snapshot() leaves the recording transaction's own
--    xid out of its list, and once a later transaction has ended its xmax is past that
--    xid, so the rule read the xid as ended before the snapshot. A job the same
--    transaction made available afterwards, as a consumer does that fetched and then gave
--    a job back (nack_job) or enqueued a follow-up before acking, was then neither after
--    the mark nor an arrival (its pair, new, was never taken up): no claim read it again.
--    With a few other transactions committing meanwhile, 15 of 20 such jobs were lost.
--    look_snapshot() is the current snapshot with the own xid counted as running.
--
-- 2. The claim counts the running jobs of limited tenants, and reads their lanes, under a
--    snapshot taken after it has locked them: READ COMMITTED takes one per statement. A
--    REPEATABLE READ or SERIALIZABLE transaction keeps the snapshot of its first
--    statement: a fetch in one counted a tenant's running jobs as they were before
--    another claim took one (slots 1, two running), and the upkeep's fold and pruning
--    under one lost running deltas and pairs. claim_jobs (hence fetch_jobs), fold_running
--    and prune_lanes now refuse any isolation but READ COMMITTED, naming it.
--
-- 3. prune_lanes waited for the arrivals lock with no bound; a fetch's transaction holds it
--    until it ends, so an open one held up the whole upkeep. It now waits 200 ms at most,
--    and leaves the idle pairs and stale marks to a later pass.
--
-- The bodies are those of 000032 (claim_jobs, prune_lanes), 000033 (take_up_arrivals) and
-- 000030 (fold_running) but for these changes.

CREATE FUNCTION :SCHEMA.look_snapshot() RETURNS pg_snapshot LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN a.own IS NULL OR a.own >= pg_snapshot_xmax(a.s) THEN a.s
    ELSE (least(pg_snapshot_xmin(a.s), a.own)::text || ':' || pg_snapshot_xmax(a.s)::text || ':'
          || (SELECT string_agg(u.x::text, ',' ORDER BY u.x)
              FROM (SELECT pg_snapshot_xip(a.s) UNION SELECT a.own) u(x)))::pg_snapshot
  END
  FROM (SELECT pg_current_snapshot() AS s, pg_current_xact_id_if_assigned() AS own) a
$$;

CREATE FUNCTION :SCHEMA.need_read_committed(p_caller text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION '%() needs READ COMMITTED, not %', p_caller, upper(current_setting('transaction_isolation'))
      USING ERRCODE = 'invalid_transaction_state',
        HINT = 'It counts running jobs and reads lanes under a snapshot taken after its locks; '
          || 'call it in a transaction of its own, or one at READ COMMITTED.';
  END IF;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.take_up_arrivals() RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  -- one statement, so the snapshot recorded is the one the arrivals were read under
  WITH added AS (
    INSERT INTO :SCHEMA.active_pairs (queue, tenant)
    SELECT a.queue, a.tenant FROM :SCHEMA.arrived_pairs() a
    ON CONFLICT DO NOTHING
  )
  INSERT INTO :SCHEMA.pair_scans (snap) VALUES (:SCHEMA.look_snapshot());
END $$;

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
  -- when there are some: they may have more. Each round takes at least one job or ends.
  LOOP
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
             OR coalesce(t.slots, v_default) > :SCHEMA.running_now(t.tenant, ''))
      ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
      LIMIT least(p_max_tenants, v_left)
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
    lanes AS MATERIALIZED (
      SELECT l.queue, l.tenant, l.concurrency_key, e.free, sh.n AS share, e.last_served_at, e.shared,
             CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                  ELSE e.per_key - :SCHEMA.running_now(l.tenant, l.concurrency_key) END AS key_free,
             m.priority AS m_priority, m.id AS m_id, m.snap AS m_snap
      FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant CROSS JOIN share sh
      CROSS JOIN LATERAL :SCHEMA.lane_mark(l.queue, l.tenant) m
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
    IF cardinality(v_ids) = 0 THEN RETURN; END IF;

    -- 3. Claim them, by tuple id (no index lookups). A job changed meanwhile (cancelled,
    --    expired) has moved or is no longer available, and is left out. A rate-limited
    --    tenant's row is locked by this claim, so its starts are always counted.
    RETURN QUERY
    WITH claimed AS (
      UPDATE :SCHEMA.jobs j
      SET state = 'running', attempts = j.attempts + 1, locked_by = p_worker,
          lease_token = nextval(':SCHEMA.lease_tokens'),
          started_at = v_now, lease_until = now() + p_lease_ms * interval '1 millisecond'
      -- IS NOT DISTINCT FROM: the same test (state is never null), but one that no partial
      -- index on `state = 'available'` matches, so the plan is a TID scan and not a whole
      -- scan of such an index, dead entries and all
      WHERE j.ctid = ANY (v_tids) AND j.state IS NOT DISTINCT FROM 'available'
      RETURNING j.*
    ),
    served AS (
      INSERT INTO :SCHEMA.tenant_serves (tenant) SELECT DISTINCT c.tenant FROM claimed c
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
    SELECT array_agg(c.t) INTO v_full FROM (
      SELECT t FROM unnest(v_tenants) t GROUP BY t HAVING count(*) >= v_share) c;
    EXIT WHEN v_left <= 0 OR v_full IS NULL;
    v_candidates := v_full;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.prune_lanes() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
  w :SCHEMA.lane_prune;
  v_timeout text := current_setting('lock_timeout');
  v_locked boolean;
BEGIN
  PERFORM :SCHEMA.need_read_committed('prune_lanes');
  -- The arrivals lock, waited for 200 ms at most: a consumer's transaction holds it from
  -- its fetch to its end, and an open one held up the whole upkeep (the reaping, the
  -- promotions and the fold stayed uncommitted behind it). Without it, the idle pairs and
  -- the stale marks wait for a later pass; the pruning below goes on.
  PERFORM set_config('lock_timeout', '200ms', true);
  BEGIN
    PERFORM pg_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
    v_locked := true;
  EXCEPTION WHEN lock_not_available THEN
    v_locked := false;
  END;
  PERFORM set_config('lock_timeout', v_timeout, true);
  v_n := 0;
  IF v_locked THEN
    -- A fresh snapshot after the lock: an arrival it misses is one the next look sees.
    -- Pairs with no work and no claim for a minute out.
    WITH idle AS MATERIALIZED (
      SELECT a.queue, a.tenant FROM :SCHEMA.active_pairs a
      WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.lane_marks m
                        WHERE m.queue = a.queue AND m.tenant = a.tenant AND m.claimed
                          AND m.at > now() - interval '1 minute')
    ),
    busy AS (
      SELECT b.queue, b.tenant FROM unnest(:SCHEMA.pairs_with_work(
        ARRAY(SELECT ROW(i.queue, i.tenant, NULL):::SCHEMA.lane FROM idle i))) b
    )
    DELETE FROM :SCHEMA.active_pairs a USING idle i
    WHERE a.queue = i.queue AND a.tenant = i.tenant
      AND NOT EXISTS (SELECT 1 FROM busy b WHERE b.queue = a.queue AND b.tenant = a.tenant);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    -- Marks kept fresh: a reader's scan of arrivals starts at the oldest mark it holds, so
    -- a lane not claimed for a while (full, paused, idle) would pull it back. A mark older
    -- than a second gets a successor at the same position under this snapshot when no job
    -- at or before the position arrived since: then every job available in this snapshot at
    -- or before it is gone, as the old mark said of its own.
    WITH stale AS MATERIALIZED (
      SELECT a.queue, a.tenant, m.priority, m.id, m.snap FROM :SCHEMA.active_pairs a
      CROSS JOIN LATERAL :SCHEMA.lane_mark(a.queue, a.tenant) m
      WHERE m.at < now() - interval '1 second'
    ),
    arr AS MATERIALIZED (
      SELECT a.queue, a.tenant FROM :SCHEMA.arrivals_behind(
        ARRAY(SELECT s.queue FROM stale s), ARRAY(SELECT s.tenant FROM stale s),
        ARRAY(SELECT s.priority FROM stale s), ARRAY(SELECT s.id FROM stale s),
        ARRAY(SELECT s.snap FROM stale s)) a
    )
    INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap, claimed)
    SELECT s.queue, s.tenant, s.priority, s.id, :SCHEMA.look_snapshot(), false FROM stale s
    WHERE NOT EXISTS (SELECT 1 FROM arr a WHERE a.queue = s.queue AND a.tenant = s.tenant);
  END IF;
  -- Marks, serves and looks that have a newer one of their own are read no more. Each
  -- pass deletes them from a little before where the previous one stopped, on the seq key:
  -- a pass does not read again the rows earlier passes deleted (dead and kept while a
  -- horizon is pinned). The overlap takes up rows that were not yet committed when the
  -- previous pass ran; every 100th pass starts from the beginning.
  UPDATE :SCHEMA.lane_prune SET passes = passes + 1 RETURNING * INTO w;
  DELETE FROM :SCHEMA.lane_marks m
  WHERE m.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.marks - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.lane_marks n
                WHERE n.queue = m.queue AND n.tenant = m.tenant AND n.seq > m.seq);
  DELETE FROM :SCHEMA.tenant_serves s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.serves - 5000 END
    AND EXISTS (SELECT 1 FROM :SCHEMA.tenant_serves n WHERE n.tenant = s.tenant AND n.seq > s.seq);
  DELETE FROM :SCHEMA.pair_scans s
  WHERE s.seq > CASE WHEN w.passes % 100 = 0 THEN 0 ELSE w.scans - 5000 END
    AND s.seq < (SELECT max(n.seq) FROM :SCHEMA.pair_scans n);
  UPDATE :SCHEMA.lane_prune SET
    marks = coalesce((SELECT max(m.seq) FROM :SCHEMA.lane_marks m), marks),
    serves = coalesce((SELECT max(s.seq) FROM :SCHEMA.tenant_serves s), serves),
    scans = coalesce((SELECT max(s.seq) FROM :SCHEMA.pair_scans s), scans);
  RETURN v_n;
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.fold_running() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_upto bigint;
  v_n integer;
BEGIN
  PERFORM :SCHEMA.need_read_committed('fold_running');
  IF NOT pg_try_advisory_xact_lock(:SCHEMA.running_lock(), 0) THEN RETURN 0; END IF;
  SELECT f.upto INTO v_upto FROM :SCHEMA.running_fold f;
  WITH gone AS (
    DELETE FROM :SCHEMA.running_deltas d WHERE d.seq > v_upto RETURNING d.*
  ),
  sums AS (
    SELECT g.tenant, g.ckey, sum(g.n)::integer AS n FROM gone g GROUP BY g.tenant, g.ckey
  ),
  merged AS (
    INSERT INTO :SCHEMA.running_base AS b (tenant, ckey, n)
    SELECT s.tenant, s.ckey, s.n FROM sums s WHERE s.n <> 0
    ON CONFLICT (tenant, ckey) DO UPDATE SET n = b.n + excluded.n
  )
  SELECT count(*), max(g.seq) INTO v_n, v_upto FROM gone g;
  IF v_n = 0 THEN RETURN 0; END IF;
  UPDATE :SCHEMA.running_fold SET upto = v_upto;
  DELETE FROM :SCHEMA.running_base b WHERE b.n = 0;
  RETURN v_n;
END $$;
