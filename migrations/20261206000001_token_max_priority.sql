-- The highest priority a token's tasks may carry (docs/flow-control.md, "Fair shares"):
-- fair shares order owners within a priority, so a tenant that could use any priority
-- could still go ahead of everyone. NULL: no ceiling (tokens made before keep theirs).
ALTER TABLE api_tokens ADD COLUMN max_priority integer;
