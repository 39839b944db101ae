-- Registration tokens get a name for listings, and may limit what a runner registering
-- with them claims: NULL is "any" (every token of the release before).
ALTER TABLE registration_tokens
    ADD COLUMN name   text,
    ADD COLUMN labels text[],
    ADD COLUMN queues text[];
