//! `/ui/config.json`: the node's settings the page needs, public like the page. Only
//! what an operator chose to show users belongs here.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

pub(super) async fn config_json(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        // Where a task's trace is shown (`--ui-trace-url`), or null: no trace links.
        "trace_url": state.config.ui_trace_url.as_ref().map(|t| t.as_str()),
    }))
}
