-- When each part of a chunk of output came, and on which stream
-- (crates/baton-core/src/log_marks.rs): `offset@milliseconds:o|e`, space-separated, as the
-- runner sent them, only those of the bytes the row stores. NULL: none came (a runner of
-- an earlier release). Nullable, no default: no table rewrite.
ALTER TABLE task_logs ADD COLUMN marks text;
