-- Pausing a queue: claims that start after pause_queue() committed take none of its jobs
-- (running ones go on); enqueues still land in it. A claim finds its (queue, tenant)
-- pairs through ready_pairs, which leaves paused queues out.
CREATE TABLE :SCHEMA.paused_queues (
  queue text PRIMARY KEY CHECK (length(queue) BETWEEN 1 AND 128),
  paused_at timestamptz NOT NULL DEFAULT now()
);

-- Pauses (p_paused) or resumes a queue; true if that changed anything. A resume wakes
-- idle workers.
CREATE FUNCTION :SCHEMA.pause_queue(p_queue text, p_paused boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF p_paused THEN
    INSERT INTO :SCHEMA.paused_queues (queue) VALUES (p_queue) ON CONFLICT DO NOTHING;
    RETURN FOUND;
  END IF;
  DELETE FROM :SCHEMA.paused_queues WHERE queue = p_queue;
  IF FOUND THEN
    PERFORM pg_notify(:SCHEMA_LITERAL || ':jobs', '');
    RETURN true;
  END IF;
  RETURN false;
END $$;

-- As in 000018, without the paused queues.
CREATE OR REPLACE FUNCTION :SCHEMA.ready_pairs(p_queues text[], p_tenant text)
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
  END IF;
  SELECT array_agg(q) INTO v_queues FROM unnest(v_queues) q
  WHERE NOT EXISTS (SELECT 1 FROM :SCHEMA.paused_queues p WHERE p.queue = q);
  IF v_queues IS NULL THEN RETURN NULL; END IF;
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
