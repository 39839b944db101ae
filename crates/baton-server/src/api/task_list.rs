//! Finding tasks: `GET /v1/tasks` (a page, newest or oldest first) and `GET
//! /v1/tasks/count` (how many the same filters match), both read from Postgres.

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::state::AppState;
use crate::views::task_summary_view;
use axum::Json;
use axum::extract::State;
use baton_client::{TaskCount, TaskList};
use baton_core::TaskStatus;
use baton_core::validate;
use baton_store::{ListOrder, TaskFilter};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

/// Which tasks a listing or a count takes (`GET /v1/tasks/count`).
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct FilterQuery {
    #[param(value_type = Option<baton_core::TaskStatus>)]
    status: Option<String>,
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    queue: Option<String>,
    /// Only the tasks this schedule made.
    schedule_id: Option<Uuid>,
    /// Only the tasks carrying this label.
    #[param(pattern = r"^[a-zA-Z0-9][a-zA-Z0-9._:=/-]{0,63}$")]
    label: Option<String>,
    /// Only the tasks whose command (its words joined by spaces) or script contains this
    /// text in its first 4,096 characters, ignoring case; `%` and `_` are plain
    /// characters. A few such searches run at once on a node (429 past them), each for
    /// at most 5 s (422 past it: narrow the filter).
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    text: Option<String>,
    /// Only the tasks created at or after this time (RFC 3339).
    created_after: Option<DateTime<Utc>>,
    /// Only the tasks created before this time (RFC 3339).
    created_before: Option<DateTime<Utc>>,
}

/// A page of a listing: [`FilterQuery`]'s filters, and where and how the page starts.
/// (Spelled out again rather than flattened: serde refuses unknown fields only of a
/// struct that flattens nothing.)
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    #[param(value_type = Option<baton_core::TaskStatus>)]
    status: Option<String>,
    #[param(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    queue: Option<String>,
    /// Only the tasks this schedule made.
    schedule_id: Option<Uuid>,
    /// Only the tasks carrying this label.
    #[param(pattern = r"^[a-zA-Z0-9][a-zA-Z0-9._:=/-]{0,63}$")]
    label: Option<String>,
    /// As for a count: the text a command or script contains.
    #[param(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*$"
    )]
    text: Option<String>,
    /// Only the tasks created at or after this time (RFC 3339).
    created_after: Option<DateTime<Utc>>,
    /// Only the tasks created before this time (RFC 3339).
    created_before: Option<DateTime<Utc>>,
    /// How many tasks a page holds.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    cursor: Option<Uuid>,
    /// Which tasks come first.
    #[param(inline)]
    order: Option<Order>,
}

impl ListQuery {
    /// Its filters, apart from its paging.
    fn filters(&self) -> FilterQuery {
        FilterQuery {
            status: self.status.clone(),
            queue: self.queue.clone(),
            schedule_id: self.schedule_id,
            label: self.label.clone(),
            text: self.text.clone(),
            created_after: self.created_after,
            created_before: self.created_before,
        }
    }

    fn order(&self) -> ListOrder {
        match self.order {
            None | Some(Order::Newest) => ListOrder::NewestFirst,
            Some(Order::Oldest) => ListOrder::OldestFirst,
        }
    }
}

/// The newest tasks first (the default), or the oldest.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
enum Order {
    Newest,
    Oldest,
}

const LIST_DEFAULT: i64 = 100;
/// Most tasks one page lists.
pub(crate) const LIST_MAX: i64 = 1000;
/// The most tasks a count counts: past it, "at least this many".
pub(crate) const COUNT_CAP: i64 = 10_000;
/// The longest text searched for: no index serves the search, and a short text is
/// what a person types.
pub(crate) const TEXT_MAX_CHARS: usize = 200;
/// How long a list or count may read Postgres (a text search walks the table); past it,
/// 422.
const LIST_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// What a listing's filters select, checked.
struct Selection {
    filter: TaskFilter,
    label: Option<String>,
    text: Option<String>,
}

impl FilterQuery {
    /// The filters, checked field by field, for the tasks `owner` may see, from
    /// `cursor` on, `limit` at most.
    fn selection(
        &self,
        owner: Option<String>,
        cursor: Option<Uuid>,
        limit: i64,
    ) -> Result<Selection, ApiError> {
        let status = self
            .status
            .as_deref()
            .map(str::parse::<TaskStatus>)
            .transpose()
            .map_err(|e| validate::Invalid::new("status", e.to_string()))?;
        if let Some(queue) = &self.queue {
            validate::check_queue(queue)?;
        }
        if let Some(label) = &self.label {
            baton_core::labels::check_label(label)
                .map_err(|e| validate::Invalid::new("label", e.message))?;
        }
        if let Some(text) = &self.text
            && (text.is_empty()
                || text.chars().count() > TEXT_MAX_CHARS
                || text.chars().any(char::is_control))
        {
            return Err(validate::Invalid::new(
                "text",
                format!("must be 1-{TEXT_MAX_CHARS} characters, none of them control characters"),
            )
            .into());
        }
        if let (Some(after), Some(before)) = (self.created_after, self.created_before)
            && after >= before
        {
            return Err(validate::Invalid::new(
                "created_after",
                "must be before created_before".to_string(),
            )
            .into());
        }
        Ok(Selection {
            filter: TaskFilter {
                status,
                queue: self.queue.clone(),
                created_by: owner,
                before: cursor,
                schedule_id: self.schedule_id,
                limit,
                created_after: self.created_after,
                created_before: self.created_before,
            },
            label: self.label.clone(),
            text: self.text.clone(),
        })
    }
}

/// A text search, or a count, holds its connection longest (each may read every row it
/// matches): only a few at once, so the pool always has connections for everything else.
fn long_read_place(
    state: &AppState,
    long: bool,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
    if !long {
        return Ok(None);
    }
    state
        .text_searches
        .clone()
        .try_acquire_owned()
        .map(Some)
        .map_err(|_| {
            ApiError::too_many(format!(
                "{} text searches and counts already run on this node (max_text_searches): \
                 try again in a moment",
                state.config.limits.max_text_searches
            ))
        })
}

/// Lists tasks, newest first (or oldest), filtered and paged by cursor.
#[utoipa::path(operation_id = "list_tasks", get, path = "/v1/tasks", tag = "tasks", security(("bearer" = [])),
    params(ListQuery),
    responses((status = 200, description = "A page; pass `next_cursor` as `cursor` for the next one, in the same order", body = TaskList), Errors)
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    user: User,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let owner = user.task_scope()?.map(str::to_string);
    let limit = q.limit.unwrap_or(LIST_DEFAULT);
    validate::check_range("limit", limit, 1, LIST_MAX)?;
    let order = q.order();
    let selection = q.filters().selection(owner, q.cursor, limit)?;
    let _searching = long_read_place(&state, selection.text.is_some())?;
    let rows = state
        .store
        .task_list_matching(
            &selection.filter,
            selection.label.as_deref(),
            selection.text.as_deref(),
            order,
            LIST_BOUND,
        )
        .await?;
    let next_cursor = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|t| t.id.to_string()))
        .flatten();
    let rows = crate::task_reads::with_leases(&state.coord, rows).await;
    Ok(Json(TaskList {
        tasks: rows.into_iter().map(task_summary_view).collect(),
        next_cursor,
    }))
}

/// Counts the tasks a listing's filters match, up to 10,000.
#[utoipa::path(operation_id = "count_tasks", get, path = "/v1/tasks/count", tag = "tasks", security(("bearer" = [])),
    params(FilterQuery),
    responses((status = 200, description = "How many match; `capped` when 10,000 or more", body = TaskCount), Errors)
)]
pub(crate) async fn count(
    State(state): State<AppState>,
    user: User,
    ApiQuery(q): ApiQuery<FilterQuery>,
) -> Result<Json<TaskCount>, ApiError> {
    let owner = user.task_scope()?.map(str::to_string);
    let selection = q.selection(owner, None, COUNT_CAP)?;
    let _counting = long_read_place(&state, true)?;
    let (count, capped) = state
        .store
        .task_count_matching(
            &selection.filter,
            selection.label.as_deref(),
            selection.text.as_deref(),
            COUNT_CAP,
            LIST_BOUND,
        )
        .await?;
    Ok(Json(TaskCount { count, capped }))
}
