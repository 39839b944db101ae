-- Idempotency keys are scoped to the token that submitted (stored as `<owner>:<key>`,
-- see baton-core/src/idempotency.rs): keys written before are moved under their owner.
-- Only keyed tasks are touched, which the retention keeps to a week of them.
UPDATE tasks
SET idempotency_key = created_by || ':' || idempotency_key
WHERE idempotency_key IS NOT NULL
  AND idempotency_key NOT LIKE created_by || ':%';
