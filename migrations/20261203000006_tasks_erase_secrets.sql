-- A task's secret values are erased the moment it ends, whatever ends it (a runner's
-- report, the reconciler, a cancel, the queue timeout): a trigger, so that no path of the
-- status machine can forget. The names stay, as empty strings: a task's view lists which
-- secrets it was given, never their values. `tests/secrets_at_rest.rs` checks every
-- terminal status of `TaskStatus` against this list.
CREATE FUNCTION tasks_erase_secrets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.secret_env := (SELECT jsonb_object_agg(name, '') FROM jsonb_object_keys(NEW.secret_env) AS name);
    RETURN NEW;
END
$$;

CREATE TRIGGER tasks_erase_secrets
    BEFORE UPDATE OF status ON tasks
    FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired')
          AND NEW.status IS DISTINCT FROM OLD.status
          AND NEW.secret_env <> '{}'::jsonb)
    EXECUTE FUNCTION tasks_erase_secrets();

-- Tasks that ended before this release. Only ended rows, which nothing else writes but
-- the janitor's delete: the rows it locks hold up no task's progress.
UPDATE tasks
SET secret_env = (SELECT jsonb_object_agg(name, '') FROM jsonb_object_keys(secret_env) AS name)
WHERE status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'expired')
  AND secret_env <> '{}'::jsonb;
