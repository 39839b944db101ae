-- An API token may carry an expiry; NULL never expires (every token of the release
-- before, and those made without one).
ALTER TABLE api_tokens ADD COLUMN expires_at timestamptz;
