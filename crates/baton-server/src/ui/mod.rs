//! The web console: a single page served by every node under `/ui`, built into the
//! binary (nothing is fetched from elsewhere at run time), that reads and steers the
//! cluster through the same `/v1` API as any user, with the user's own API token.
//!
//! The page itself is public: it holds no data, so its routes take no token. Data comes
//! from `/v1`, where the token the user signs in with decides what they see and may do.
//! It is not API either, so none of its routes is in `/openapi.json`. docs/console.md
//! says what the pages show and how they are kept safe.

mod assets;
mod page_config;
mod security_headers;

use crate::state::AppState;
use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;

/// `/ui/`, `/ui/config.json` and one route per built-in file, each answered with the
/// console's security headers. An unknown `/ui/...` path falls through to the API's
/// JSON 404, and the per-route metrics stay a fixed set of names.
pub(crate) fn router() -> Router<AppState> {
    let mut router = Router::new()
        // The assets are named relative to the page (`app.js`), so the page must be
        // read at `/ui/`, not `/ui`.
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { asset_response(assets::INDEX) }))
        .route("/ui/config.json", get(page_config::config_json));
    for asset in assets::ASSETS {
        router = router.route(
            &format!("/ui/{}", asset.path),
            get(move || async move { asset_response(asset) }),
        );
    }
    router.layer(axum::middleware::from_fn(security_headers::add))
}

/// A built-in file with its content type. `no-cache`: the browser asks again each time,
/// so a node upgraded in place serves its own page, never a stale mix of two versions.
fn asset_response(asset: &'static assets::Asset) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        asset.body,
    )
}
