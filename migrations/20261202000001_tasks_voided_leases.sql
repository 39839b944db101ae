-- Leases Redis handed out that Postgres never saw start, voided before their task went back
-- to its queue: `start` refuses each of them, as it refuses the lease of the task's last run
-- (`lease_id`). A constant default: no table rewrite.
ALTER TABLE tasks ADD COLUMN voided_leases uuid[] NOT NULL DEFAULT '{}';
