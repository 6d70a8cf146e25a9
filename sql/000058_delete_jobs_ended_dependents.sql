-- A job whose waiting dependents ended another way (cancelled, expired) can be deleted.
--
-- delete_jobs refused a job while any job_deps edge named it as the dependency. An edge
-- goes when its dependency ends (settle_dependents) or its dependent is deleted, but not
-- when the dependent ends first: a waiting dependent cancelled or expired left its edge,
-- and the dependency, which nothing waits for any more, answered has_dependents until it
-- ended itself. Now only an edge whose dependent is still in jobs holds a delete back, and
-- a deleted job's edges go both ways. The body is the baseline's (part 7) but for that.

CREATE OR REPLACE FUNCTION :SCHEMA.delete_jobs(p_ids bigint[])
RETURNS TABLE (id bigint, outcome text) LANGUAGE plpgsql AS $$
DECLARE
  v_locked bigint[];
  v_deleted bigint[];
BEGIN
  -- locked first, in id order: an enqueue naming one as a dependency has committed its
  -- edge or waits for this transaction, and the checks below, a statement later, see it
  SELECT array_agg(j.id ORDER BY j.id) INTO v_locked
  FROM (SELECT j.id FROM :SCHEMA.jobs j WHERE j.id = ANY (p_ids) ORDER BY j.id FOR UPDATE) j;
  WITH gone AS (
    DELETE FROM :SCHEMA.jobs j
    WHERE j.id = ANY (v_locked) AND j.state IN ('available', 'scheduled', 'failed')
      -- a dependent still waiting (an edge of one that ended is a leftover)
      AND NOT EXISTS (SELECT 1 FROM :SCHEMA.job_deps d JOIN :SCHEMA.jobs w ON w.id = d.dependent
                      WHERE d.dependency = j.id)
    RETURNING j.id),
  edges AS (DELETE FROM :SCHEMA.job_deps d USING gone g WHERE d.dependent = g.id OR d.dependency = g.id)
  SELECT array_agg(g.id) INTO v_deleted FROM gone g;
  v_deleted := coalesce(v_deleted, '{}');
  WITH gone AS (
    DELETE FROM :SCHEMA.job_history h
    WHERE h.id = ANY (p_ids) AND NOT h.id = ANY (coalesce(v_locked, '{}'))
    RETURNING h.id)
  SELECT v_deleted || coalesce(array_agg(g.id), '{}') INTO v_deleted FROM gone g;
  RETURN QUERY
  SELECT x.id, CASE
    WHEN x.id = ANY (v_deleted) THEN 'deleted'
    WHEN j.state = 'running' THEN 'running'
    WHEN j.id IS NOT NULL THEN 'has_dependents'
    ELSE 'not_found' END
  FROM unnest(p_ids) AS x(id) LEFT JOIN :SCHEMA.jobs j ON j.id = x.id;
END $$;
