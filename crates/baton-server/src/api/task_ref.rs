//! A task named in a path (`baton_client::TaskRef`): by its whole id, or by its short id —
//! the last 12 hex digits, the random end of a UUIDv7, which the console's tables show and
//! the CLI prints — as git takes a commit's short hash. A short id names the one task (of
//! those the caller may see) whose id ends with it: none is a 404, several a 409 listing
//! them.

use crate::auth::User;
use crate::error::ApiError;
use crate::state::AppState;
use axum::http::StatusCode;
use baton_client::{ErrorCode, TaskRef};
use baton_store::StoreError;
use uuid::Uuid;

/// The whole id `task` names for `user` to read: a short id is looked up among the tasks
/// the caller may read, so it never tells of another's task.
pub(crate) async fn resolve(
    task: TaskRef,
    state: &AppState,
    user: &User,
) -> Result<Uuid, ApiError> {
    resolve_among(task, state, user.task_scope()?).await
}

/// The whole id `task` names for `user` to change (cancel, re-run): a short id is looked
/// up among the tasks the caller may change, so one it could not act on never makes its
/// own ambiguous.
pub(crate) async fn resolve_to_change(
    task: TaskRef,
    state: &AppState,
    user: &User,
) -> Result<Uuid, ApiError> {
    resolve_among(task, state, user.task_change_scope()?).await
}

/// Among the tasks `owner` submitted, or all of them.
async fn resolve_among(
    task: TaskRef,
    state: &AppState,
    owner: Option<&str>,
) -> Result<Uuid, ApiError> {
    let short = match task {
        TaskRef::Id(id) => return Ok(id),
        TaskRef::Short(short) => short,
    };
    let ids = state.store.tasks_by_short_id(&short, owner).await?;
    match ids.as_slice() {
        [] => Err(StoreError::NotFound.into()),
        [id] => Ok(*id),
        several => Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::AmbiguousId,
            format!(
                "short id {short} names several tasks ({}{}): use the whole id",
                several
                    .iter()
                    .map(Uuid::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                if several.len() as i64 >= baton_store::SHORT_ID_MATCHES {
                    ", and maybe more"
                } else {
                    ""
                }
            ),
        )),
    }
}
