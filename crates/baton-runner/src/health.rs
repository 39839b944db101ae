//! The agent's own health: whether it is leasing, and why not. Served on `/healthz`
//! (when `healthz_listen` is set) for a supervisor or an orchestrator's probe, beside
//! the agent's Prometheus metrics on `/metrics`.

use axum::Json;
use axum::extract::State;
use axum::routing::get;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Health {
    pub runner_id: Option<baton_core::RunnerId>,
    /// Tasks running now.
    pub running: usize,
    /// Whether it asks the server for work right now.
    pub leasing: bool,
    /// Why it does not, if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_leasing_because: Option<String>,
}

pub(crate) type SharedHealth = Arc<Mutex<Health>>;

async fn healthz(State(health): State<SharedHealth>) -> Json<Health> {
    Json(health.lock().expect("health lock").clone())
}

/// The agent's metrics in the Prometheus text format.
async fn metrics() -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::metrics::install().render(),
    )
}

/// Serves `/healthz` and `/metrics` until `stop`.
pub(crate) async fn serve(
    addr: SocketAddr,
    health: SharedHealth,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "runner health endpoint listening");
    let app = axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(health);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// Free space in the file system holding `dir`, in MiB (`None` if it cannot be read).
pub(crate) fn free_disk_mb(dir: &Path) -> Option<u64> {
    let probe = std::iter::successors(Some(dir), |d| d.parent()).find(|d| d.exists())?;
    let stat = nix::sys::statvfs::statvfs(probe).ok()?;
    Some(stat.blocks_available() as u64 * stat.fragment_size() as u64 / (1 << 20))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_free_space_even_for_a_dir_not_made_yet() {
        let free = super::free_disk_mb(std::path::Path::new("/tmp/not/made/yet"));
        assert!(free.is_some_and(|mb| mb > 0));
    }
}
