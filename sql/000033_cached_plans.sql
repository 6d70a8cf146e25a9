-- Plans kept per connection for the functions a claim calls.
--
-- PostgreSQL (before 18) plans the body of a SQL function it cannot inline on every call:
-- once per call site in each statement that uses it, and again for each call from a
-- client. The claim's helpers could not be inlined where they were called (a SET clause,
-- a sub-select in the body or in the arguments, a CTE, an INSERT), so each claim planned
-- about ten queries before it read a row. PL/pgSQL keeps a function's plans for the life
-- of the connection, and a worker's connections live long. The bodies are the same
-- queries; only the language changes. One call was inlined before: arrivals_behind in
-- the claim's new marks (step 4), whose arguments are plain variables; it is now a call
-- with a kept plan of its own, like its other three callers.
--
-- Measured on PostgreSQL 15, one idle lane, on a connection that had claimed before:
-- ready_pairs 0.95 -> 0.39 ms, a claim of one job 3.0 -> 1.6 ms, an empty claim
-- 1.8 -> 0.6 ms (docs/design/storage.md, "Kept plans", has the latency it gave).
--
-- A kept plan is made once, often while the tables are small, and made again only when
-- something invalidates it (an ANALYZE or VACUUM of a table it reads, DDL): each query
-- here must have one plan that stays right at any size. Those that read tables run with
-- `enable_seqscan = off`, and reads that must start at a position ask for the order of
-- the index that starts there. The lane check of pairs_with_work, an EXISTS, tied between
-- jobs_ready and jobs_ready_pair and took the first, which has the concurrency key before
-- the position: with a horizon pinned it read each lane from its dead front, and a claim
-- grew from 3.1 to 12.7 ms over 100 000 jobs (npm run bench -- pinned) where the body
-- planned per call had stayed flat. A read with no index path left (a one-row table read
-- whole) would cost 10^10 with sequential scans off, past JIT's thresholds (hundreds of
-- ms to compile a read of one row): those name their row by key, and the same functions
-- run with `jit = off`, as the claim and the completion do.
--
-- `#variable_conflict use_column`: output columns are named like the table columns the
-- queries read (always qualified there).

CREATE OR REPLACE FUNCTION :SCHEMA.lane_mark(
  p_queue text, p_tenant text,
  OUT priority smallint, OUT id bigint, OUT xmax xid8, OUT xip xid8[], OUT at timestamptz,
  OUT snap pg_snapshot
) LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
  SELECT coalesce(m.priority, -32768), coalesce(m.id, 0), pg_snapshot_xmax(m.snap),
         coalesce(ARRAY(SELECT pg_snapshot_xip(m.snap)), '{}'), m.at, m.snap
  INTO priority, id, xmax, xip, at, snap
  FROM (SELECT) one LEFT JOIN LATERAL (
    SELECT m.priority, m.id, m.snap, m.at FROM :SCHEMA.lane_marks m
    WHERE m.queue = p_queue AND m.tenant = p_tenant ORDER BY m.seq DESC LIMIT 1
  ) m ON pg_snapshot_xmax(m.snap) <= pg_snapshot_xmax(pg_current_snapshot());
END $$;

-- Still never inlined (see 000032): no condition of a caller's lane is pushed in.
CREATE OR REPLACE FUNCTION :SCHEMA.arrivals_before(p_xmax xid8, p_xip xid8[], p_priority smallint, p_id bigint)
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
SET max_parallel_workers_per_gather = 0
AS $$
#variable_conflict use_column
BEGIN
  -- two ranges, not an OR: each is an index condition whatever the estimates
  RETURN QUERY
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state IS NOT DISTINCT FROM 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid >= p_xmax
    AND (j.priority, j.id) <= (p_priority, p_id)
  UNION ALL
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state IS NOT DISTINCT FROM 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid = ANY (p_xip)
    AND (p_xmax IS NULL OR j.avail_xid < p_xmax) AND (j.priority, j.id) <= (p_priority, p_id);
END $$;

-- Its caller passes a sub-select, which keeps it from being inlined.
CREATE OR REPLACE FUNCTION :SCHEMA.arrivals_since(p_xmax xid8, p_xip xid8[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  RETURN QUERY SELECT * FROM :SCHEMA.arrivals_before(p_xmax, p_xip, 32767::smallint, 9223372036854775807);
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.arrivals_behind(p_queues text[], p_tenants text[], p_priorities smallint[],
                                                   p_ids bigint[], p_snaps pg_snapshot[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, expires_at timestamptz)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH m AS MATERIALIZED (
    SELECT q.queue, q.tenant, q.priority, q.id, pg_snapshot_xmax(q.snap) AS xmax,
           ARRAY(SELECT pg_snapshot_xip(q.snap)) AS xip
    FROM unnest(p_queues, p_tenants, p_priorities, p_ids, p_snaps) AS q(queue, tenant, priority, id, snap)
  )
  SELECT a.id, a.tid, a.queue, a.tenant, a.priority, a.expires_at
  FROM (SELECT m.priority, m.id FROM m ORDER BY m.priority DESC, m.id DESC LIMIT 1) b
  CROSS JOIN LATERAL :SCHEMA.arrivals_before(
    (SELECT min(m.xmax) FROM m), ARRAY(SELECT DISTINCT x FROM m, unnest(m.xip) x), b.priority, b.id) a
  WHERE EXISTS (SELECT 1 FROM m
                WHERE m.queue = a.queue AND m.tenant = a.tenant
                  AND (a.avail_xid >= m.xmax OR a.avail_xid = ANY (m.xip))
                  AND (a.priority, a.id) <= (m.priority, m.id));
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
  INSERT INTO :SCHEMA.pair_scans (snap) VALUES (pg_current_snapshot());
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.pairs_with_work(p_pairs :SCHEMA.lane[]) RETURNS :SCHEMA.lane[]
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  RETURN (
    WITH pairs AS MATERIALIZED (
      SELECT p.queue, p.tenant, m.priority, m.id, m.snap
      FROM unnest(p_pairs) p CROSS JOIN LATERAL :SCHEMA.lane_mark(p.queue, p.tenant) m
    ),
    arr AS MATERIALIZED (
      SELECT a.queue, a.tenant FROM :SCHEMA.arrivals_behind(
        ARRAY(SELECT p.queue FROM pairs p), ARRAY(SELECT p.tenant FROM pairs p),
        ARRAY(SELECT p.priority FROM pairs p), ARRAY(SELECT p.id FROM pairs p),
        ARRAY(SELECT p.snap FROM pairs p)) a
    )
    -- the first job after the mark, in lane order: only jobs_ready_pair gives that order,
    -- and it starts at the mark (jobs_ready, with the concurrency key before the position,
    -- would be read from the lane's front, dead entries and all)
    SELECT array_agg(ROW(p.queue, p.tenant, NULL):::SCHEMA.lane) FROM pairs p
    WHERE (SELECT j.id FROM :SCHEMA.jobs j
           WHERE j.state = 'available' AND j.queue = p.queue AND j.tenant = p.tenant
             AND (j.priority, j.id) > (p.priority, p.id)
           ORDER BY j.priority, j.id LIMIT 1) IS NOT NULL
       OR EXISTS (SELECT 1 FROM arr a WHERE a.queue = p.queue AND a.tenant = p.tenant));
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.key_lanes(p_queue text, p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
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
    FROM (SELECT * FROM k LIMIT (SELECT c.key_lanes FROM :SCHEMA.config c WHERE c.singleton)) k);
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.served_at(p_tenant text) RETURNS timestamptz LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  RETURN coalesce(
    (SELECT s.at FROM :SCHEMA.tenant_serves s WHERE s.tenant = p_tenant ORDER BY s.at DESC LIMIT 1),
    '-infinity');
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.running_now(p_tenant text, p_key text) RETURNS integer
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  RETURN coalesce((SELECT b.n FROM :SCHEMA.running_base b WHERE b.tenant = p_tenant AND b.ckey = p_key), 0)
       + coalesce((SELECT sum(d.n)::integer FROM :SCHEMA.running_deltas d
                   WHERE d.tenant = p_tenant AND d.ckey = p_key
                     AND d.seq > (SELECT f.upto FROM :SCHEMA.running_fold f WHERE f.one)), 0);
END $$;

-- Asked by every idle claim loop after an empty claim.
CREATE OR REPLACE FUNCTION :SCHEMA.next_due_at() RETURNS timestamptz LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  RETURN least(
    (SELECT min(j.run_at) FROM :SCHEMA.jobs j WHERE j.state IN ('scheduled', 'failed') AND j.waiting_on = 0),
    (SELECT to_timestamp(min((t.rate_window + 1) * t.rate_per_ms) / 1000.0) FROM :SCHEMA.tenants t
     WHERE t.rate_limit IS NOT NULL AND t.rate_used >= t.rate_limit
       AND t.rate_window >= :SCHEMA.rate_window(t.rate_per_ms, now())));
END $$;

CREATE OR REPLACE FUNCTION :SCHEMA.next_due_in_ms() RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_at timestamptz := :SCHEMA.next_due_at();
BEGIN
  -- greatest() skips NULLs: nothing pending must stay NULL, not become "due now"
  RETURN CASE WHEN v_at IS NULL THEN NULL
              ELSE greatest(0, ceil(extract(epoch FROM v_at - clock_timestamp()) * 1000))::bigint END;
END $$;

-- The same rule for the completion's helper, which had its SET clause before.
ALTER FUNCTION :SCHEMA.settle_dependents(bigint[], boolean) SET jit = off;
