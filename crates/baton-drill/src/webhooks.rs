//! A webhook receiver for the drill: it records every delivery by its idempotency key
//! and, to exercise the outbox's retries, refuses about one in ten.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Seen {
    /// Idempotency key -> (task status in the body, deliveries accepted).
    deliveries: HashMap<String, (String, u32)>,
    refused: u32,
}

pub struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

type Shared = (Arc<Mutex<Seen>>, Arc<Mutex<StdRng>>);

async fn hook(
    State((seen, rng)): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<serde_json::Value>,
) -> StatusCode {
    if rng.lock().expect("rng lock").random_range(0..10) == 0 {
        seen.lock().expect("seen lock").refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let status = body["task"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut seen = seen.lock().expect("seen lock");
    seen.deliveries.entry(key).or_insert((status, 0)).1 += 1;
    StatusCode::OK
}

impl Receiver {
    pub async fn start(seed: u64) -> anyhow::Result<Receiver> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed ^ 0x400c)));
        let app = axum::Router::new()
            .route("/hook", post(hook))
            .with_state((seen.clone(), rng));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Receiver { url, seen })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The status the body carried for `key`, if it was delivered.
    pub fn delivered(&self, key: &str) -> Option<String> {
        self.seen
            .lock()
            .expect("seen lock")
            .deliveries
            .get(key)
            .map(|(status, _)| status.clone())
    }

    /// (distinct keys delivered, deliveries in all, deliveries refused)
    pub fn counts(&self) -> (usize, u32, u32) {
        let seen = self.seen.lock().expect("seen lock");
        let total = seen.deliveries.values().map(|(_, n)| n).sum();
        (seen.deliveries.len(), total, seen.refused)
    }
}
