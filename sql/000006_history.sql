-- History at scale: retention (a default and per-tenant overrides), dropping whole day
-- partitions, batched deletes for tenants kept shorter, and partitions that repair the
-- default one.
--
-- Retention is stored, not passed by each process: whichever worker holds the upkeep
-- lock applies the same policy.

ALTER TABLE :SCHEMA.config ADD COLUMN retention interval CHECK (retention > interval '0'); -- NULL: keep
ALTER TABLE :SCHEMA.tenants ADD COLUMN retention interval CHECK (retention > interval '0'); -- NULL: config's

-- Runs p_sql with a short lock timeout; false (and nothing done) if a lock was not had in
-- time. Creating or dropping a partition locks job_history itself: it waits for every
-- reader of the table, and while it waits every completion queues behind it. A stall of
-- at most the timeout, then another try at a later upkeep, is better than a queue behind
-- a long report.
CREATE FUNCTION :SCHEMA.try_ddl(p_sql text, p_timeout text DEFAULT '50ms')
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_old text := current_setting('lock_timeout');
BEGIN
  PERFORM set_config('lock_timeout', p_timeout, true);
  BEGIN
    EXECUTE p_sql;
  EXCEPTION WHEN lock_not_available THEN
    PERFORM set_config('lock_timeout', v_old, true);
    RETURN false;
  END;
  PERFORM set_config('lock_timeout', v_old, true);
  RETURN true;
END $$;

-- Creates the partition of one UTC day if missing. Rows of that day that went to the
-- default partition meanwhile (no upkeep ran for days: e.g. only SQL consumers acked)
-- are moved into it, so the default partition stays empty and never blocks a new day.
-- Returns whether it created the partition.
CREATE FUNCTION :SCHEMA.create_history_partition(p_day date)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_part text := 'job_history_' || to_char(p_day, 'YYYYMMDD');
  v_lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
  v_hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
  IF to_regclass(format('%I.%I', :SCHEMA_LITERAL, v_part)) IS NOT NULL THEN
    RETURN false;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM :SCHEMA.job_history_default d
                 WHERE d.finished_at >= v_lo AND d.finished_at < v_hi) THEN
    RETURN :SCHEMA.try_ddl(format(
      'CREATE TABLE %I.%I PARTITION OF %I.job_history FOR VALUES FROM (%L) TO (%L)',
      :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi));
  END IF;
  -- the check constraint lets ATTACH skip scanning the new table
  EXECUTE format('CREATE TABLE %I.%I (LIKE %I.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
                    CONSTRAINT in_range CHECK (finished_at >= %L AND finished_at < %L))',
                 :SCHEMA_LITERAL, v_part, :SCHEMA_LITERAL, v_lo, v_hi);
  EXECUTE format('WITH moved AS (DELETE FROM %I.job_history_default WHERE finished_at >= $1 AND finished_at < $2
                  RETURNING *) INSERT INTO %I.%I SELECT * FROM moved', :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part)
    USING v_lo, v_hi;
  IF NOT :SCHEMA.try_ddl(format('ALTER TABLE %I.job_history ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                                :SCHEMA_LITERAL, :SCHEMA_LITERAL, v_part, v_lo, v_hi)) THEN
    RAISE lock_not_available USING MESSAGE = 'job_history is busy: partition ' || v_part || ' not attached';
  END IF;
  EXECUTE format('ALTER TABLE %I.%I DROP CONSTRAINT in_range', :SCHEMA_LITERAL, v_part);
  RETURN true;
END $$;

-- Creates the daily history partitions from yesterday to p_days_ahead days ahead (UTC
-- days), and those of past days found in the default partition. Returns how many.
CREATE OR REPLACE FUNCTION :SCHEMA.ensure_history_partitions(p_days_ahead integer DEFAULT 3)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  d date;
  created integer := 0;
BEGIN
  FOR d IN
    SELECT generate_series((now() AT TIME ZONE 'UTC')::date - 1,
                           (now() AT TIME ZONE 'UTC')::date + p_days_ahead, '1 day')::date
    UNION
    SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM :SCHEMA.job_history_default h
    ORDER BY 1
  LOOP
    BEGIN
      IF :SCHEMA.create_history_partition(d) THEN
        created := created + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      NULL;  -- the next upkeep tries again (the partitions are made days ahead)
    END;
  END LOOP;
  RETURN created;
END $$;

-- Applies retention, a batch at a time. A tenant's retention is its own, else the
-- default (config.retention); NULL keeps forever.
--  1. Day partitions older than the longest retention in force are dropped whole.
--  2. Tenants kept shorter than that have their older rows deleted, oldest first, at most
--     p_batch rows per call (through job_history_tenant), and so have rows older than the
--     longest retention left in the default partition.
-- Returns {"dropped": [partition, ...], "deleted": rows, "more": whether to call again}.
CREATE FUNCTION :SCHEMA.prune_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_default interval;
  v_longest interval;
  v_now timestamptz := now();
  v_dropped text[] := '{}';
  v_deleted integer := 0;
  v_n integer;
  v_upto timestamptz;
  v_more boolean := false;
  r record;
BEGIN
  SELECT c.retention INTO v_default FROM :SCHEMA.config c;
  -- the longest retention in force: NULL (forever) if the default keeps forever
  SELECT CASE WHEN v_default IS NULL THEN NULL
              ELSE greatest(v_default, max(t.retention)) END
  INTO v_longest FROM :SCHEMA.tenants t;

  IF v_longest IS NOT NULL THEN
    FOR r IN
      SELECT c.relname AS part FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = format('%I.job_history', :SCHEMA_LITERAL)::regclass
        AND c.relname ~ '^job_history_\d{8}$'
        AND (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= v_now - v_longest
      ORDER BY 1
    LOOP
      -- a busy table is left for the next upkeep (a minute later), not retried at once
      IF :SCHEMA.try_ddl(format('DROP TABLE %I.%I', :SCHEMA_LITERAL, r.part), '100ms') THEN
        v_dropped := v_dropped || r.part;
      END IF;
    END LOOP;
    DELETE FROM :SCHEMA.job_history_default d WHERE d.ctid = ANY (ARRAY(
      SELECT x.ctid FROM :SCHEMA.job_history_default x WHERE x.finished_at < v_now - v_longest LIMIT p_batch));
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
  END IF;

  -- tenants kept shorter than the longest retention: those with a shorter retention of
  -- their own and, when another tenant is kept longer than the default, every tenant
  -- under the default, found in the history itself (a loose index scan).
  FOR r IN
    WITH RECURSIVE seen AS (
      (SELECT h.tenant FROM :SCHEMA.job_history h WHERE v_default < v_longest ORDER BY h.tenant LIMIT 1)
      UNION ALL
      SELECT (SELECT h.tenant FROM :SCHEMA.job_history h WHERE h.tenant > s.tenant ORDER BY h.tenant LIMIT 1)
      FROM seen s WHERE s.tenant IS NOT NULL
    ),
    named AS (
      SELECT s.tenant FROM seen s WHERE s.tenant IS NOT NULL
      UNION
      SELECT t.tenant FROM :SCHEMA.tenants t WHERE t.retention IS NOT NULL
    )
    SELECT n.tenant, v_now - coalesce(t.retention, v_default) AS cutoff
    FROM named n LEFT JOIN :SCHEMA.tenants t ON t.tenant = n.tenant
    WHERE coalesce(t.retention, v_default) IS NOT NULL
      AND (v_longest IS NULL OR coalesce(t.retention, v_default) < v_longest)
    ORDER BY 2
  LOOP
    EXIT WHEN v_deleted >= p_batch;
    -- the oldest rows first, up to what is left of the batch
    SELECT h.finished_at INTO v_upto FROM :SCHEMA.job_history h
    WHERE h.tenant = r.tenant AND h.finished_at < r.cutoff
    ORDER BY h.finished_at LIMIT 1 OFFSET p_batch - v_deleted - 1;
    IF FOUND THEN
      v_more := true;
    ELSE
      v_upto := r.cutoff;
    END IF;
    DELETE FROM :SCHEMA.job_history h
    WHERE h.tenant = r.tenant AND h.finished_at < r.cutoff AND h.finished_at <= v_upto;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_deleted := v_deleted + v_n;
  END LOOP;
  RETURN jsonb_build_object('dropped', to_jsonb(v_dropped), 'deleted', v_deleted,
                            'more', v_more OR v_deleted >= p_batch);
END $$;

-- History upkeep, by one process at a time (the others get NULL): partitions ahead, then
-- a batch of retention. Its lock key is in a space of its own: (hashtext(schema), n) are
-- the workers' locks.
CREATE FUNCTION :SCHEMA.maintain_history(p_batch integer DEFAULT 10000)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_created integer;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext(:SCHEMA_LITERAL || ':history'), 0) THEN
    RETURN NULL;
  END IF;
  v_created := :SCHEMA.ensure_history_partitions();
  RETURN :SCHEMA.prune_history(p_batch) || jsonb_build_object('created', v_created);
END $$;

-- Changes retention settings: a tenant's (p_tenant) or the default (p_tenant NULL).
-- p_reset sets it back to NULL (the default's, or forever for the default).
CREATE FUNCTION :SCHEMA.set_retention(p_tenant text, p_retention interval, p_reset boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF p_tenant IS NULL THEN
    UPDATE :SCHEMA.config SET retention = CASE WHEN p_reset THEN NULL ELSE coalesce(p_retention, retention) END;
    RETURN;
  END IF;
  INSERT INTO :SCHEMA.tenants AS t (tenant, retention) VALUES (p_tenant, p_retention)
  ON CONFLICT (tenant) DO UPDATE SET
    retention = CASE WHEN p_reset THEN NULL ELSE coalesce(p_retention, t.retention) END;
END $$;
