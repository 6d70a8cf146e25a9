-- The upkeep's search for lost jobs (reap) reads the running jobs through jobs_running.
-- As a bitmap scan it never marks the index entries of dead row versions, so after a
-- long transaction had pinned the horizon every search read all the entries the pin left
-- (and their heap pages) again, until a vacuum removed them: minutes, for a busy queue.
-- As a plain index scan its first search after the pin marks them dead and the next ones
-- skip them; while the pin lasts it reads more a search, which the search's pace (at most
-- a tenth of the upkeep's time) bounds. Sequential scans off too: without the bitmap scan
-- a planner misled by a quiet table's statistics would read the whole heap instead; and
-- JIT off, as wherever sequential scans are off (a small table read whole would be costed
-- past JIT's thresholds).
ALTER FUNCTION :SCHEMA.reap(integer) SET enable_bitmapscan = off;
ALTER FUNCTION :SCHEMA.reap(integer) SET enable_seqscan = off;
ALTER FUNCTION :SCHEMA.reap(integer) SET jit = off;
