-- no-transaction
-- A task by its short id, the last 12 hex digits of its id (the random end of a UUIDv7,
-- what the console's tables show and the CLI accepts): `GET /v1/tasks/{id}` and every task
-- path resolve one through here rather than reading the whole table. Collation "C":
-- the digits are compared as bytes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS tasks_short_id
    ON tasks ((right(id::text, 12) COLLATE "C"));
