-- Claims that a pinned xmin horizon cannot slow down.
--
-- Every production PostgreSQL has long transactions (an idle session, an analytics query,
-- a replication slot). While one is open, no row version deleted or updated after it began
-- can be removed from the heap or from any index. A claim that reads a lane from its start
-- then walks the dead index entries of every job claimed since — measured (`npm run bench
-- -- pinned`): one claim 4 ms before the pin, 68 ms after 100 000 jobs; with slot limits,
-- whose running jobs were counted on an index of the same kind, 114 ms.
--
-- The rule now: no statement of the claim reads an index range that the claim itself
-- keeps killing. Four pieces, each append-only on the hot path, and plans told so (5, 6):
--
-- 1. Lane marks. After a claim took jobs of a (queue, tenant) lane, in (priority, id)
--    order, it appends a mark: a position, and a snapshot in which no job of the lane at
--    or before the position is available (taken after its own update, so that the jobs
--    it claimed count as gone).
--    The next claim reads the lane from the position on, so its index scan starts among
--    live entries, plus the "arrivals": jobs made available by a transaction the mark's
--    snapshot did not see (jobs.avail_xid, written at insert and by a trigger whenever a
--    job becomes available again), which may sit before the position (a job committed
--    late, a retry, a promoted delayed job). Those are found by avail_xid, not by position:
--    `avail_xid >= xmax(snapshot) OR avail_xid IN xip(snapshot)`, as PgQ reads events
--    between ticks, in one read for all the lanes of a claim. The new position is the
--    furthest job the claim took before the first job still available after the old one,
--    so a job skipped — locked by a parallel claim that may yet roll back, committed
--    late — is never passed; and no mark is written while an arrival before the old
--    position is still available. Marks are read
--    newest first; older ones go in the upkeep, behind the newest, where no read goes.
--    The upkeep also renews a lane's mark that is over a second old (same position, its
--    own snapshot) when nothing arrived at or before the position since, so that no idle
--    or full lane pulls every reader's read of arrivals back to its old snapshot.
-- 2. Active pairs. The (queue, tenant) pairs with work were found by walking the ready
--    index — from its dead front. Now a claim looks up the pairs in active_pairs plus the
--    pairs of the arrivals since the previous look (pair_scans: one snapshot each); one
--    claim at a time (a try-lock) adds those pairs and records its snapshot as the next
--    look. The upkeep removes pairs with nothing available and no claim for a minute,
--    under the same lock, so an arrival it did not see is seen by the next look.
-- 3. Serves. Round-robin order came from tenants.last_served_at, updated by every claim:
--    under a pinned horizon each tenant row grew a chain of versions as long as the
--    claims made. Now a claim appends to tenant_serves and the order reads each tenant's
--    newest entry (an index descent).
-- 4. Running counts. A limited tenant's running jobs were counted on jobs_running, whose
--    dead entries (finished jobs) grew without bound. Now every statement that moves jobs
--    into or out of 'running' appends the change to running_deltas (a statement trigger,
--    so no path can forget it); a count is running_base plus the deltas after the last
--    fold. The upkeep folds the deltas into the base about twice a second, holding an
--    advisory lock that writers take shared, so the deltas it folds are all the committed
--    ones. Exact as before: claims of a limited tenant are serialized by its row lock.
--
-- What still walks dead entries under a pinned horizon: the key lanes of tenants with a
-- per-key limit (found and read as before, at most config.key_lanes keys a claim), the
-- rate-limited tenants' rows (their window is counted in the row), the upkeep's search
-- for running jobs whose lease ran out (every pass, off the claim path), and the arrivals
-- read (the jobs enqueued since the oldest mark a claim holds, about a second's worth).

-- 1. Lane marks
ALTER TABLE :SCHEMA.jobs ADD COLUMN avail_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
-- `avail_xid IS NOT NULL` (always true) keeps the planner from taking this small index
-- for any query that asks only for available jobs: only a condition on avail_xid proves it.
CREATE INDEX jobs_arrivals ON :SCHEMA.jobs (avail_xid) WHERE state = 'available' AND avail_xid IS NOT NULL;

CREATE FUNCTION :SCHEMA.jobs_available_again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.avail_xid := pg_current_xact_id();
  RETURN NEW;
END $$;
-- A job that becomes available, or moves to another lane or place while available, is an
-- arrival of the transaction doing it.
CREATE TRIGGER jobs_available_again BEFORE UPDATE ON :SCHEMA.jobs FOR EACH ROW
WHEN (NEW.state = 'available' AND (OLD.state <> 'available' OR OLD.queue <> NEW.queue
      OR OLD.tenant <> NEW.tenant OR OLD.priority <> NEW.priority))
EXECUTE FUNCTION :SCHEMA.jobs_available_again();

CREATE TABLE :SCHEMA.lane_marks (
  seq bigint GENERATED ALWAYS AS IDENTITY,
  queue text NOT NULL,
  tenant text NOT NULL,
  priority smallint NOT NULL,
  id bigint NOT NULL,
  snap pg_snapshot NOT NULL,
  at timestamptz NOT NULL DEFAULT now(),
  -- false: written by the upkeep to renew an idle lane's snapshot, not by a claim
  claimed boolean NOT NULL DEFAULT true,
  PRIMARY KEY (seq)
);
CREATE INDEX lane_marks_newest ON :SCHEMA.lane_marks (queue, tenant, seq DESC);

-- Where a claim starts reading a (queue, tenant) lane: after (priority, id), plus the
-- arrivals the mark's snapshot did not see (avail_xid >= xmax or in xip). No mark: the
-- lane from its start, no arrivals. A mark from the future (a database restored into
-- another cluster, whose transaction ids start lower) is no mark: its arrivals rule would
-- miss jobs.
CREATE FUNCTION :SCHEMA.lane_mark(
  p_queue text, p_tenant text,
  OUT priority smallint, OUT id bigint, OUT xmax xid8, OUT xip xid8[], OUT at timestamptz,
  OUT snap pg_snapshot
) LANGUAGE sql STABLE AS $$
  SELECT coalesce(m.priority, -32768), coalesce(m.id, 0), pg_snapshot_xmax(m.snap),
         coalesce(ARRAY(SELECT pg_snapshot_xip(m.snap)), '{}'), m.at, m.snap
  FROM (SELECT) one LEFT JOIN LATERAL (
    SELECT m.priority, m.id, m.snap, m.at FROM :SCHEMA.lane_marks m
    WHERE m.queue = p_queue AND m.tenant = p_tenant ORDER BY m.seq DESC LIMIT 1
  ) m ON pg_snapshot_xmax(m.snap) <= pg_snapshot_xmax(pg_current_snapshot())
$$;

-- The jobs made available by a transaction a snapshot did not see, in every lane: read
-- on jobs_arrivals alone (its SET clause, section 6, keeps it from being inlined, so no
-- condition on the lane is pushed in and no plan reads a lane from its dead front
-- instead). Readers pass the oldest xmax and all the xips of the marks they hold and
-- filter per mark.
CREATE FUNCTION :SCHEMA.arrivals_since(p_xmax xid8, p_xip xid8[])
RETURNS TABLE (id bigint, tid tid, queue text, tenant text, priority smallint, avail_xid xid8,
               expires_at timestamptz)
LANGUAGE sql STABLE AS $$
  -- two ranges, not an OR: each is an index condition whatever the estimates
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state = 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid >= p_xmax
  UNION ALL
  SELECT j.id, j.ctid, j.queue, j.tenant, j.priority, j.avail_xid, j.expires_at FROM :SCHEMA.jobs j
  WHERE j.state = 'available' AND j.avail_xid IS NOT NULL AND j.avail_xid = ANY (p_xip)
    AND (p_xmax IS NULL OR j.avail_xid < p_xmax)
$$;

-- 2. Active pairs
CREATE TABLE :SCHEMA.active_pairs (
  queue text NOT NULL,
  tenant text NOT NULL,
  PRIMARY KEY (queue, tenant)
);
CREATE TABLE :SCHEMA.pair_scans (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  snap pg_snapshot NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);
-- the snapshot first: a job committed after it is an arrival for the first look
INSERT INTO :SCHEMA.pair_scans (snap) VALUES (pg_current_snapshot());
INSERT INTO :SCHEMA.active_pairs (queue, tenant)
SELECT DISTINCT j.queue, j.tenant FROM :SCHEMA.jobs j WHERE j.state = 'available';

-- The lock of the look at arrivals (and of the upkeep's removal of idle pairs).
CREATE FUNCTION :SCHEMA.arrivals_lock() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(':SCHEMA' || ':arrivals') $$;

-- The pairs of the jobs that arrived since the previous look.
CREATE FUNCTION :SCHEMA.arrived_pairs() RETURNS TABLE (queue text, tenant text)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT a.queue, a.tenant
  FROM (SELECT s.snap FROM :SCHEMA.pair_scans s ORDER BY s.seq DESC LIMIT 1) prev
  CROSS JOIN LATERAL :SCHEMA.arrivals_since(
    pg_snapshot_xmax(prev.snap), ARRAY(SELECT pg_snapshot_xip(prev.snap))) a
$$;

-- Adds them to the active pairs; one statement, so the snapshot recorded is the one the
-- arrivals were read under. The caller holds the lock.
CREATE FUNCTION :SCHEMA.take_up_arrivals() RETURNS void LANGUAGE sql AS $$
  WITH added AS (
    INSERT INTO :SCHEMA.active_pairs (queue, tenant)
    SELECT a.queue, a.tenant FROM :SCHEMA.arrived_pairs() a
    ON CONFLICT DO NOTHING
  )
  INSERT INTO :SCHEMA.pair_scans (snap) VALUES (pg_current_snapshot())
$$;

-- Pairs with an available job: after their mark (an index range that starts among live
-- entries), or among the arrivals their mark did not see (one read for all of them).
CREATE FUNCTION :SCHEMA.pairs_with_work(p_pairs :SCHEMA.lane[]) RETURNS :SCHEMA.lane[]
LANGUAGE sql STABLE AS $$
  WITH pairs AS MATERIALIZED (
    SELECT p.queue, p.tenant, m.priority, m.id, m.xmax, m.xip
    FROM unnest(p_pairs) p CROSS JOIN LATERAL :SCHEMA.lane_mark(p.queue, p.tenant) m
  ),
  arr AS MATERIALIZED (
    SELECT a.queue, a.tenant, a.avail_xid FROM :SCHEMA.arrivals_since(
      (SELECT min(p.xmax) FROM pairs p), ARRAY(SELECT DISTINCT x FROM pairs p, unnest(p.xip) x)) a
  )
  SELECT array_agg(ROW(p.queue, p.tenant, NULL):::SCHEMA.lane) FROM pairs p
  WHERE EXISTS (SELECT 1 FROM :SCHEMA.jobs j
                WHERE j.state = 'available' AND j.queue = p.queue AND j.tenant = p.tenant
                  AND (j.priority, j.id) > (p.priority, p.id))
     OR EXISTS (SELECT 1 FROM arr a
                WHERE a.queue = p.queue AND a.tenant = p.tenant
                  AND (a.avail_xid >= p.xmax OR a.avail_xid = ANY (p.xip)))
$$;

-- The (queue, tenant) pairs with available jobs, as lanes with no key.
CREATE OR REPLACE FUNCTION :SCHEMA.ready_pairs(p_queues text[], p_tenant text)
RETURNS :SCHEMA.lane[] LANGUAGE plpgsql AS $$
DECLARE
  v_took boolean := pg_try_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
BEGIN
  IF v_took THEN
    PERFORM :SCHEMA.take_up_arrivals();
  END IF;
  -- Without the lock (another claim or the upkeep holds it), the arrivals are read all the
  -- same: a job committed before this claim began is always seen by it.
  RETURN :SCHEMA.pairs_with_work(ARRAY(
    SELECT ROW(a.queue, a.tenant, NULL):::SCHEMA.lane FROM (
      SELECT p.queue, p.tenant FROM :SCHEMA.active_pairs p
      UNION
      SELECT n.queue, n.tenant FROM :SCHEMA.arrived_pairs() n WHERE NOT v_took
    ) a
    WHERE (p_queues IS NULL OR a.queue = ANY (p_queues))
      AND (p_tenant IS NULL OR a.tenant = p_tenant)
      AND NOT EXISTS (SELECT 1 FROM :SCHEMA.paused_queues p WHERE p.queue = a.queue)));
END $$;

-- 3. Serves
CREATE TABLE :SCHEMA.tenant_serves (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant text NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX tenant_serves_newest ON :SCHEMA.tenant_serves (tenant, at DESC);
INSERT INTO :SCHEMA.tenant_serves (tenant, at)
SELECT t.tenant, t.last_served_at FROM :SCHEMA.tenants t WHERE t.last_served_at > '-infinity';
ALTER TABLE :SCHEMA.tenants DROP COLUMN last_served_at;

-- When a tenant was last served ('-infinity': never).
CREATE FUNCTION :SCHEMA.served_at(p_tenant text) RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT s.at FROM :SCHEMA.tenant_serves s WHERE s.tenant = p_tenant ORDER BY s.at DESC LIMIT 1),
    '-infinity')
$$;

-- 4. Running counts, per tenant (ckey '') and per tenant and concurrency key
CREATE TABLE :SCHEMA.running_base (
  tenant text NOT NULL,
  ckey text NOT NULL,
  n integer NOT NULL,
  PRIMARY KEY (tenant, ckey)
);
CREATE TABLE :SCHEMA.running_deltas (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant text NOT NULL,
  ckey text NOT NULL,
  n integer NOT NULL
);
CREATE INDEX running_deltas_lane ON :SCHEMA.running_deltas (tenant, ckey, seq) INCLUDE (n);
-- the deltas at or before `upto` are in running_base
CREATE TABLE :SCHEMA.running_fold (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  upto bigint NOT NULL
);
INSERT INTO :SCHEMA.running_fold (upto) VALUES (0);
INSERT INTO :SCHEMA.running_base (tenant, ckey, n)
SELECT j.tenant, '', count(*) FROM :SCHEMA.jobs j WHERE j.state = 'running' GROUP BY j.tenant
UNION ALL
SELECT j.tenant, j.concurrency_key, count(*) FROM :SCHEMA.jobs j
WHERE j.state = 'running' AND j.concurrency_key <> '' GROUP BY j.tenant, j.concurrency_key;

CREATE FUNCTION :SCHEMA.running_lock() RETURNS integer LANGUAGE sql IMMUTABLE
AS $$ SELECT hashtext(':SCHEMA' || ':running') $$;

-- Running jobs of a tenant (p_key '') or of one of its concurrency keys.
CREATE FUNCTION :SCHEMA.running_now(p_tenant text, p_key text) RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT b.n FROM :SCHEMA.running_base b WHERE b.tenant = p_tenant AND b.ckey = p_key), 0)
       + coalesce((SELECT sum(d.n)::integer FROM :SCHEMA.running_deltas d
                   WHERE d.tenant = p_tenant AND d.ckey = p_key
                     AND d.seq > (SELECT f.upto FROM :SCHEMA.running_fold f)), 0)
$$;

-- Statement triggers: the change of running jobs per tenant and key, one row each.
CREATE FUNCTION :SCHEMA.count_running() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_tenants text[];
  v_keys text[];
  v_ns integer[];
BEGIN
  -- the rows that left 'running' (-1) and entered it (+1); new_rows only in an UPDATE
  IF TG_OP = 'UPDATE' THEN
    SELECT array_agg(m.tenant), array_agg(m.concurrency_key), array_agg(m.n) INTO v_tenants, v_keys, v_ns
    FROM (SELECT o.tenant, o.concurrency_key, -1 AS n FROM old_rows o WHERE o.state = 'running'
          UNION ALL
          SELECT w.tenant, w.concurrency_key, 1 FROM new_rows w WHERE w.state = 'running') m;
  ELSE
    SELECT array_agg(o.tenant), array_agg(o.concurrency_key), array_agg(-1) INTO v_tenants, v_keys, v_ns
    FROM old_rows o WHERE o.state = 'running';
  END IF;
  IF v_tenants IS NULL THEN RETURN NULL; END IF;
  -- per tenant ('') and per concurrency key; a lease renewed (-1 +1) writes nothing
  SELECT array_agg(d.tenant), array_agg(d.ckey), array_agg(d.n) INTO v_tenants, v_keys, v_ns FROM (
    SELECT m.tenant, k.ckey, sum(m.n)::integer AS n
    FROM unnest(v_tenants, v_keys, v_ns) m(tenant, concurrency_key, n)
    CROSS JOIN LATERAL (VALUES (''), (nullif(m.concurrency_key, ''))) k(ckey)
    WHERE k.ckey IS NOT NULL
    GROUP BY m.tenant, k.ckey HAVING sum(m.n) <> 0
  ) d;
  IF v_tenants IS NULL THEN RETURN NULL; END IF;
  -- shared, before the deltas take their seq: the fold waits for the writers in progress
  PERFORM pg_advisory_xact_lock_shared(:SCHEMA.running_lock(), 0);
  INSERT INTO :SCHEMA.running_deltas (tenant, ckey, n) SELECT * FROM unnest(v_tenants, v_keys, v_ns);
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_count_running_update AFTER UPDATE ON :SCHEMA.jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.count_running();
CREATE TRIGGER jobs_count_running_delete AFTER DELETE ON :SCHEMA.jobs
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION :SCHEMA.count_running();

-- Folds the deltas into the base. A try-lock: while a writer holds the lock shared it
-- gives up (the next pass folds); held, every delta visible is committed and no other
-- can appear before this commits. Returns how many deltas were folded.
CREATE FUNCTION :SCHEMA.fold_running() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_upto bigint;
  v_n integer;
BEGIN
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

-- Where the previous pruning stopped in each table.
CREATE TABLE :SCHEMA.lane_prune (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  marks bigint NOT NULL DEFAULT 0,
  serves bigint NOT NULL DEFAULT 0,
  scans bigint NOT NULL DEFAULT 0,
  passes bigint NOT NULL DEFAULT 0
);
INSERT INTO :SCHEMA.lane_prune DEFAULT VALUES;

-- The upkeep of the pieces above: idle pairs out (under the arrivals lock, waited for),
-- old marks renewed, marks, serves and looks behind the newest out. Returns the pairs
-- removed.
CREATE FUNCTION :SCHEMA.prune_lanes() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_n integer;
  w :SCHEMA.lane_prune;
BEGIN
  PERFORM pg_advisory_xact_lock(:SCHEMA.arrivals_lock(), 0);
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
    SELECT a.queue, a.tenant, m.priority, m.id, m.xmax, m.xip FROM :SCHEMA.active_pairs a
    CROSS JOIN LATERAL :SCHEMA.lane_mark(a.queue, a.tenant) m
    WHERE m.at < now() - interval '1 second'
  ),
  arr AS MATERIALIZED (
    SELECT a.* FROM :SCHEMA.arrivals_since(
      (SELECT min(s.xmax) FROM stale s), ARRAY(SELECT DISTINCT x FROM stale s, unnest(s.xip) x)) a
  )
  INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap, claimed)
  SELECT s.queue, s.tenant, s.priority, s.id, pg_current_snapshot(), false FROM stale s
  WHERE NOT EXISTS (SELECT 1 FROM arr a
                    WHERE a.queue = s.queue AND a.tenant = s.tenant
                      AND (a.avail_xid >= s.xmax OR a.avail_xid = ANY (s.xip))
                      AND (a.priority, a.id) <= (s.priority, s.id));
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

-- 5. Completions and leases by id. These functions join a list of ids (at most a batch)
-- to `jobs`. Their plans were cached once per session, generic: a plan made while `jobs`
-- was small joins by a sequential scan, which under a pinned horizon reads every dead row
-- version the queue has left (measured: finish_jobs 2 ms before the pin, 10 ms after
-- 100 000 jobs). Planned on each call, a plan sees the table's size as it is now (its
-- pages, dead ones included) and looks the ids up; planning costs ~0.1 ms a call.
ALTER FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION :SCHEMA.requeue_jobs(jsonb, boolean) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION :SCHEMA.heartbeat(integer, bigint[], bigint[], integer) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION :SCHEMA.requeue_lost(bigint[], integer[]) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION :SCHEMA.retry_jobs(bigint[]) SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION :SCHEMA.set_progress(bigint[], bigint[], jsonb[]) SET plan_cache_mode = force_custom_plan;

-- 6. The same for three of the claim's helpers. Each reads an index range that starts among
-- live entries; but a plan made from statistics can prefer a sequential scan (an EXISTS
-- over a lane with a backlog "finds a row at once"; a small table of marks), and under a
-- pinned horizon the heap's first pages hold nothing but dead rows — measured in the
-- pressure run's pinned phase: pairs_with_work 0.8–1.7 s a call, on a seq scan of `jobs`
-- that read 82 000 pages; lane_mark 6 ms on a seq scan of lane_marks. (Not on the small
-- helpers that PostgreSQL inlines into the claim: a SET clause stops the inlining, and
-- planning them on every call cost more than it saved.)
ALTER FUNCTION :SCHEMA.lane_mark(text, text) SET enable_seqscan = off;
ALTER FUNCTION :SCHEMA.pairs_with_work(:SCHEMA.lane[]) SET enable_seqscan = off;
-- and the arrivals read: after ANALYZE has seen a flood of jobs just enqueued, "enqueued
-- since" looks like most of the table, and a seq scan of `jobs` (20 ms with 150 000 jobs
-- waiting, three times a claim) replaced a range read that finds none
ALTER FUNCTION :SCHEMA.arrivals_since(xid8, xid8[]) SET enable_seqscan = off;

-- As in 000013, with the fold and the pruning as steps of their own.
CREATE OR REPLACE FUNCTION :SCHEMA.maintain(p_grace_ms integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_done jsonb := '{}';
  v_errors jsonb := '[]';
  r record;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(':SCHEMA'), 0) THEN
    RETURN NULL;
  END IF;
  BEGIN
    SELECT * INTO r FROM :SCHEMA.reap(p_grace_ms);
    v_done := v_done || jsonb_build_object('released', r.released, 'dead', r.dead, 'workers', r.workers);
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'reap', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('promoted', :SCHEMA.promote_due_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'promote', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('expired', :SCHEMA.expire_jobs());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'expire', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('partitions', :SCHEMA.ensure_history_partitions());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'partitions', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  BEGIN
    v_done := v_done || jsonb_build_object('idlePairs', :SCHEMA.prune_lanes());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'lanes', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  -- last: writers wait for the fold's lock until this transaction ends
  BEGIN
    v_done := v_done || jsonb_build_object('folded', :SCHEMA.fold_running());
  EXCEPTION WHEN OTHERS THEN
    v_errors := v_errors || jsonb_build_object('step', 'fold', 'code', SQLSTATE, 'message', SQLERRM);
  END;
  RETURN v_done || jsonb_build_object('errors', v_errors);
END $$;

-- As in 000018, with lanes read from their marks, tenants' turns from their serves and
-- running jobs from the counts.
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
           OR coalesce(t.slots, v_default) > :SCHEMA.running_now(t.tenant, ''))
    ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
    LIMIT least(p_max_tenants, p_limit)
    FOR UPDATE OF t SKIP LOCKED
  ) e;

  -- 1b. Unlimited tenants: shared advisory locks (no row locks, no writes).
  SELECT coalesce(array_agg(u.tenant), '{}') INTO v_shared FROM (
    SELECT t.tenant, t.slots FROM :SCHEMA.tenants t
    WHERE t.tenant = ANY (v_candidates) AND NOT t.paused
      AND t.per_key IS NULL AND coalesce(t.slots, v_default) IS NULL AND t.rate_limit IS NULL
    ORDER BY :SCHEMA.served_at(t.tenant), t.tenant
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
  WITH elig AS MATERIALIZED (  -- MATERIALIZED: computed once, not once per picked row
    SELECT t.tenant, :SCHEMA.served_at(t.tenant) AS last_served_at, t.per_key,
           t.tenant = ANY (v_shared) AS shared,
           least(:SCHEMA.rate_left(t, v_now),
             CASE WHEN lim.n IS NULL THEN p_limit
                  ELSE least(p_limit, lim.n - :SCHEMA.running_now(t.tenant, '')) END) AS free
    FROM :SCHEMA.tenants t
    CROSS JOIN LATERAL (SELECT coalesce(t.slots, (SELECT default_slots FROM :SCHEMA.config)) AS n) lim
    WHERE t.tenant = ANY (v_exclusive)
       OR (t.tenant = ANY (v_shared) AND lim.n IS NULL AND t.per_key IS NULL AND t.rate_limit IS NULL
           AND NOT t.paused)
  ),
  lanes AS MATERIALIZED (
    SELECT l.queue, l.tenant, l.concurrency_key, e.free, e.last_served_at, e.shared,
           CASE WHEN l.concurrency_key IS NULL OR l.concurrency_key = '' OR e.per_key IS NULL THEN NULL
                ELSE e.per_key - :SCHEMA.running_now(l.tenant, l.concurrency_key) END AS key_free,
           m.priority AS m_priority, m.id AS m_id, m.xmax AS m_xmax, m.xip AS m_xip, m.snap AS m_snap
    FROM unnest(v_lanes) l JOIN elig e ON e.tenant = l.tenant
    CROSS JOIN LATERAL :SCHEMA.lane_mark(l.queue, l.tenant) m
    WHERE e.free > 0
  ),
  arr AS MATERIALIZED (
    SELECT a.* FROM :SCHEMA.arrivals_since(
      (SELECT min(n.m_xmax) FROM lanes n WHERE n.concurrency_key IS NULL),
      ARRAY(SELECT DISTINCT x FROM lanes n, unnest(n.m_xip) x WHERE n.concurrency_key IS NULL)) a
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
         LIMIT n.free)
        UNION ALL
        SELECT a.id, a.tid, a.priority FROM arr a
        WHERE a.queue = n.queue AND a.tenant = n.tenant
          AND (a.avail_xid >= n.m_xmax OR a.avail_xid = ANY (n.m_xip))
          AND (a.priority, a.id) <= (n.m_priority, n.m_id)
          AND (a.expires_at IS NULL OR a.expires_at > now())
      ) y
      ORDER BY y.priority, y.id
      LIMIT n.free
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
                AND (a.avail_xid >= n.m_xmax OR a.avail_xid = ANY (n.m_xip))
                AND (a.priority, a.id) <= (n.m_priority, n.m_id)
                AND (a.expires_at IS NULL OR a.expires_at > now())))
        AND j.state IS NOT DISTINCT FROM 'available'  -- see the claim below
      ORDER BY j.priority, j.id
      LIMIT n.free
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
      LIMIT n.free - (SELECT count(*) FROM early e WHERE e.queue = n.queue AND e.tenant = n.tenant)
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
    SELECT r.* FROM ranked r WHERE r.rn <= r.free
    ORDER BY r.rn, r.last_served_at, r.tenant
    LIMIT p_limit
  )
  -- the chosen jobs, each array in the same order (step 4 zips them), and the old marks
  -- of the pair lanes chosen from, for the new marks of step 4
  SELECT c.ids, c.tids, c.queues, c.tenants, c.priorities,
         m.queues, m.tenants, m.priorities, m.ids, m.snaps
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
       v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps;
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
  INSERT INTO :SCHEMA.lane_marks (queue, tenant, priority, id, snap)
  SELECT l.queue, l.tenant, p.priority, p.id, pg_current_snapshot()
  FROM unnest(v_mark_queues, v_mark_tenants, v_mark_priorities, v_mark_ids, v_mark_snaps)
       AS l(queue, tenant, priority, id, snap)
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
    SELECT 1 FROM :SCHEMA.arrivals_since(pg_snapshot_xmax(l.snap), ARRAY(SELECT pg_snapshot_xip(l.snap))) a
    WHERE a.queue = l.queue AND a.tenant = l.tenant AND (a.priority, a.id) <= (l.priority, l.id)
      AND (a.expires_at IS NULL OR a.expires_at > now()));
END $$;
