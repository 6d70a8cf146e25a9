-- A completion planned once per connection, not at every call.
--
-- finish_jobs, move_to_history and settle_dependents were planned at each call
-- (plan_cache_mode = force_custom_plan, part 5 of the baseline): a generic plan made while
-- `jobs` was small joined by a sequential scan, which under a pinned horizon read every
-- dead row version. Planning the move to history at each call cost more than the rest of
-- it: enqueue, claim and completion of one job took 2.50 ms against 1.78 planned once
-- (pgbench, one client, four runs each). With sequential scans off, the generic plan finds
-- the jobs by id whatever the table's size when it was made, as the claim's functions do
-- (JIT is off in all three, so a plan costed 10^10 is never compiled).

ALTER FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean)
  SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean)
  SET enable_seqscan = off;
ALTER FUNCTION :SCHEMA.move_to_history(:SCHEMA.job_state, jsonb)
  SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION :SCHEMA.move_to_history(:SCHEMA.job_state, jsonb)
  SET enable_seqscan = off;
ALTER FUNCTION :SCHEMA.settle_dependents(bigint[], boolean)
  SET plan_cache_mode = force_generic_plan;
