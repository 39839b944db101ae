//! Runners on demand, as autoscalers and operators read them (docs/dynamic-runners.md):
//! `GET /v1/demand`, in the shape KEDA's `metrics-api` scaler polls, and
//! `GET /v1/provisioners`, this node's provisioners with their open assignments.

use super::openapi::Errors;
use crate::auth::User;
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::provision::demand::Measure;
use crate::services::ServiceError;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_client::{AssignmentView, DemandView, ProvisionerList, ProvisionerView};
use baton_core::provision::{Demand, Offer};
use baton_core::{LabelSet, validate};
use baton_store::AssignmentRecord;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct DemandQuery {
    /// The runner's labels, comma-separated (at least one).
    labels: String,
    /// The queues it would serve, comma-separated; absent: all.
    queues: Option<String>,
}

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn demand_view(offer: &Offer, demand: Demand) -> DemandView {
    DemandView {
        labels: offer.labels.as_slice().to_vec(),
        queues: offer.queues.clone(),
        waiting: demand.waiting,
        covered: demand.covered,
        demand: demand.uncovered(),
    }
}

async fn measure(state: &AppState, offers: &[Offer]) -> Result<Vec<Demand>, ApiError> {
    Measure {
        store: &state.store,
        coord: &state.coord,
        now: state.clock.now(),
        offline_after: Duration::from_secs(state.config.timings.runner_offline_after_s),
    }
    .demands(offers)
    .await
    .map_err(|e| match e {
        ServiceError::Store(e) => ApiError::from(e),
        ServiceError::Coord(e) => ApiError::from(e),
    })
}

/// The demand for a runner with these labels (and queues): what an autoscaler reads to
/// start runners from outside Baton (KEDA's ScaledJob, in the Helm chart).
#[utoipa::path(operation_id = "get_demand", get, path = "/v1/demand", tag = "admin", security(("bearer" = [])),
    params(DemandQuery),
    responses((status = 200, description = "Waiting tasks such a runner could take, and those no registered runner could take now", body = DemandView), Errors)
)]
pub(super) async fn demand(
    State(state): State<AppState>,
    user: User,
    ApiQuery(q): ApiQuery<DemandQuery>,
) -> Result<Json<DemandView>, ApiError> {
    user.require_read()?;
    let labels = LabelSet::new(list(&q.labels))?;
    if labels.is_empty() {
        return Err(validate::Invalid::new(
            "labels",
            "name at least one label: an unlabeled task never calls for a runner on demand",
        )
        .into());
    }
    let queues = q.queues.as_deref().map(list).unwrap_or_default();
    for queue in &queues {
        validate::check_queue(queue)?;
    }
    let offer = Offer { labels, queues };
    let demand = measure(&state, std::slice::from_ref(&offer)).await?[0];
    Ok(Json(demand_view(&offer, demand)))
}

fn assignment_view(a: AssignmentRecord) -> AssignmentView {
    AssignmentView {
        id: a.id,
        state: a.state,
        attempt: a.attempt,
        runner_name: a.runner_name,
        node_id: a.node_id,
        started_at: a.started_at,
        claimed_at: a.claimed_at,
        retry_at: a.retry_at,
        error: a.error,
    }
}

/// This node's provisioners: settings, demand, and the runners they have started.
#[utoipa::path(operation_id = "list_provisioners", get, path = "/v1/provisioners", tag = "admin", security(("bearer" = [])),
    responses((status = 200, description = "The provisioners of this node's settings", body = ProvisionerList), Errors)
)]
pub(super) async fn provisioners(
    State(state): State<AppState>,
    user: User,
) -> Result<Json<ProvisionerList>, ApiError> {
    user.require_read()?;
    let configs = &state.config.provisioners;
    let offers: Vec<Offer> = configs.iter().map(|c| c.offer()).collect();
    let demands = measure(&state, &offers).await?;
    let mut open = if configs.is_empty() {
        Vec::new()
    } else {
        state.store.assignments_open().await?
    };
    let provisioners = configs
        .iter()
        .zip(offers.iter().zip(demands))
        .map(|(config, (offer, demand))| {
            let (mine, rest) = open
                .drain(..)
                .partition(|a: &AssignmentRecord| a.provisioner == config.name);
            open = rest;
            ProvisionerView {
                name: config.name.clone(),
                backend: config.backend.as_str().to_string(),
                labels: offer.labels.as_slice().to_vec(),
                queues: offer.queues.clone(),
                capacity: config.capacity,
                demand: demand_view(offer, demand),
                assignments: mine.into_iter().map(assignment_view).collect(),
            }
        })
        .collect();
    Ok(Json(ProvisionerList { provisioners }))
}
