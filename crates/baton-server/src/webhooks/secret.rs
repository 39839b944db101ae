//! Where the signing key comes from: `webhook_secret` when the operator set one (every
//! node must then be given the same), otherwise the cluster's own, generated once and
//! kept in Postgres. Read when first needed rather than at start, so a node starting
//! while Postgres is away still comes up; a delivery that cannot read it fails and is
//! retried like any other.

use super::signing::SigningKey;
use baton_store::{Store, StoreError};
use tokio::sync::OnceCell;

pub(crate) struct ClusterSecret {
    configured: Option<SigningKey>,
    store: Store,
    loaded: OnceCell<SigningKey>,
}

impl ClusterSecret {
    pub(crate) fn new(configured: Option<SigningKey>, store: Store) -> Self {
        ClusterSecret {
            configured,
            store,
            loaded: OnceCell::new(),
        }
    }

    pub(crate) async fn get(&self) -> Result<&SigningKey, StoreError> {
        if let Some(key) = &self.configured {
            return Ok(key);
        }
        self.loaded
            .get_or_try_init(|| async {
                let candidate = SigningKey::generate().to_whsec();
                let stored = self
                    .store
                    .webhook_secret_get_or_insert(&candidate, chrono::Utc::now())
                    .await?;
                SigningKey::parse(&stored).map_err(StoreError::Internal)
            })
            .await
    }
}
