-- The design notes of the functions readers look up most, on their current definitions
-- (COMMENT ON: they are in sql/schema.sql beside the code and in \df+), since the
-- migrations that argue them restate these functions more than once.

COMMENT ON FUNCTION :SCHEMA.claim_jobs(integer, integer, integer, text[], text, integer, boolean) IS
'Claims up to p_limit available jobs for worker p_worker (NULL: a lease from fetch_jobs).
Fairness: tenants with a free slot are served least recently served first (tenant_serves),
round-robin by job; inside a tenant FIFO by (priority, id); a concurrency key gets at most
the tenant''s per_key running jobs; lanes with no free slot are never read.
Exactness (000002, 000007, 000018): a limited tenant (slots or per-key limit) is claimed
only under its row lock (FOR UPDATE SKIP LOCKED) by a statement that starts after the
lock is taken, so its count of running jobs (running_base + running_deltas, 000023) sees
every claim committed before; unlimited tenants'' claims share an advisory lock and run in
parallel, picking jobs with SKIP LOCKED; a change of limits waits for them.
Pinned horizon (000023): each (queue, tenant) lane is read from its newest snapshot mark
(lane_marks) plus the jobs that arrived since that snapshot (jobs.avail_xid), so no read
starts at a front of dead index entries left by an open transaction. Measured with
npm run bench -- pinned (100 000 jobs claimed under a pinned xmin): 4.24 -> 68.48 ms a
claim before 000023, 5.89 -> 3.69 ms after. Each lease draws a fencing token from
the lease_tokens sequence, never reissued (000013).';

COMMENT ON FUNCTION :SCHEMA.finish_jobs(:SCHEMA.job_state, jsonb, boolean) IS
'Settles the outcomes of running jobs, fenced by lease token (an outcome of a lease that
was lost changes nothing): moves them to job_history with their result, errors, stats and
progress (move_to_history), then settles their dependents (settle_dependents: counted down
under row locks in id order, made available at zero, or cancelled up a flow when a
dependency failed), and announces their ids on <schema>:done (at most 900 a notification)
for waitFor and the event stream (000005, 000013, 000020, 000022, 000025).';

COMMENT ON FUNCTION :SCHEMA.maintain(integer) IS
'The queue''s upkeep, one process at a time (advisory lock): gives back the jobs of leases
that ran out and of dead workers (after p_grace_ms when the server restarted), promotes
due delayed jobs, expires old ones, keeps history partitions ahead, prunes lane marks,
serves and pairs and folds running deltas; each step isolated, its failure reported
without stopping the others (000013, 000023).';
