-- no-transaction
-- The rows still to deliver: neither delivered nor given up. What every delivery pass and
-- the look for the next due row read, so rows given up (kept for the task's view until
-- retention) are not walked over again and again. `outbox_due` stays for nodes of the
-- release before, which do not know `given_up_at`; a later release drops it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_pending ON outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
