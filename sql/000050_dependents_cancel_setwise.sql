-- A failed dependency's dependents cancelled reading history once per dependency, in one
-- partition.
--
-- settle_dependents names, in each cancelled dependent's error, the state its failed
-- dependency ended in, read from job_history by id in a subquery run once per dependent.
-- History is partitioned by finished_at: by id alone, each dependent probed every day
-- partition up to the one holding the row. A dead job with 2 000 dependents and 35 days
-- of history made 70 000 index scans (150 000 buffers) in that statement; the whole
-- completion read 197 000 buffers in ~100 ms (median of 5, psql, 2 CPUs). The dependencies
-- read ended in this transaction (finish_jobs moved them to history): their rows have
-- finished_at = now(), which prunes the read to that day's partition, and each is read
-- once, however many dependents name it. The same completion: 1 index scan of 1
-- partition, 55 000 buffers, ~50 ms. The messages are unchanged. The body is the
-- baseline's (part 7) but for that read, with the settings of 000033 and 000047.

CREATE OR REPLACE FUNCTION :SCHEMA.settle_dependents(p_ids bigint[], p_succeeded boolean)
RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_ids bigint[] := p_ids;
  v_ok boolean := p_succeeded;
  v_dependents bigint[];
  v_counts integer[];
  v_firsts bigint[];
  v_cancel jsonb;
  v_released integer := 0;
  v_n integer;
BEGIN
  LOOP
    -- the edges from the jobs that ended, consumed
    WITH gone AS (
      DELETE FROM :SCHEMA.job_deps d WHERE d.dependency = ANY (v_ids)
      RETURNING d.dependency, d.dependent
    )
    SELECT array_agg(g.dependent ORDER BY g.dependent), array_agg(g.n ORDER BY g.dependent),
           array_agg(g.first ORDER BY g.dependent)
    INTO v_dependents, v_counts, v_firsts
    FROM (SELECT gone.dependent, count(*)::integer AS n, min(gone.dependency) AS first
          FROM gone GROUP BY gone.dependent) g;
    EXIT WHEN v_dependents IS NULL;
    -- the dependents, locked in id order (two transactions counting down the same ones
    -- never wait for each other in a cycle); NO KEY UPDATE, as the update below: an
    -- enqueue holding one of them as a dependency (KEY SHARE) does not hold this back
    PERFORM 1 FROM (SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (v_dependents)
                    ORDER BY j.id FOR NO KEY UPDATE) l;
    WITH counted AS (
      UPDATE :SCHEMA.jobs j SET
        waiting_on = j.waiting_on - x.n,
        run_at = CASE WHEN j.waiting_on = x.n THEN greatest(j.run_at, now()) ELSE j.run_at END,
        state = CASE WHEN j.waiting_on = x.n AND j.run_at <= now() THEN 'available' ELSE j.state END
      FROM unnest(v_dependents, v_counts) AS x(id, n)
      WHERE j.id = x.id AND j.waiting_on > 0
        AND (v_ok OR j.on_dependency_failure = 'continue')
      RETURNING j.state
    )
    SELECT count(*) FILTER (WHERE counted.state = 'available') INTO v_n FROM counted;
    v_released := v_released + v_n;
    EXIT WHEN v_ok;
    -- a dependency failed: the waiting dependents that do not go on end cancelled, each
    -- saying how the first of its failed dependencies ended. Those ended in this
    -- transaction (finish_jobs moved them to history, with finished_at = now()): their
    -- states are read once, from that day's partition alone, not once per dependent
    WITH cancel AS MATERIALIZED (
      SELECT j.id, j.attempts, x.first
      FROM unnest(v_dependents, v_firsts) AS x(id, first)
      JOIN :SCHEMA.jobs j ON j.id = x.id
      WHERE j.waiting_on > 0 AND coalesce(j.on_dependency_failure, 'cancel') = 'cancel'
    ),
    ended AS MATERIALIZED (
      SELECT jsonb_object_agg(f.first::text, s.state) AS states
      FROM (SELECT DISTINCT c.first FROM cancel c) f
      CROSS JOIN LATERAL (SELECT h.state FROM :SCHEMA.job_history h
                          WHERE h.id = f.first AND h.finished_at = now() LIMIT 1) s
    )
    SELECT jsonb_agg(jsonb_build_object('id', c.id, 'error', jsonb_build_object(
             'attempt', c.attempts, 'at', now(), 'name', 'DependencyFailedError',
             'message', 'job ' || c.first || ', which it depends on, ended '
                        || coalesce(e.states ->> c.first::text, 'unsuccessfully'))) ORDER BY c.id)
    INTO v_cancel
    FROM cancel c CROSS JOIN ended e;
    EXIT WHEN v_cancel IS NULL;
    v_ids := :SCHEMA.move_to_history('cancelled', v_cancel);
    EXIT WHEN v_ids IS NULL;
  END LOOP;
  IF v_released > 0 THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
  END IF;
END $$;
