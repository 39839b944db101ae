-- An API token may be limited to queues and to labels: it submits only to those queues,
-- and only tasks whose every label is one of those. NULL allows any (every token of the
-- releases before, and those made without limits).
ALTER TABLE api_tokens ADD COLUMN queues text[], ADD COLUMN labels text[];
