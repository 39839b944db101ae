//! Whether `secret_env` may be sealed yet: not while a node of an earlier release serves,
//! which would hand a sealed value to a runner as it is. A rolling upgrade keeps old and
//! new nodes serving side by side, so until every live node says it opens sealed values
//! (`NodeInfo::opens_sealed_secrets`), submits store `secret_env` as earlier releases did;
//! from then on, sealed. Only submits that carry secrets ask, and the nodes' liveness
//! records are read at most once per `RECHECK` on each node.

use baton_coord::Coord;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const RECHECK: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub(crate) struct SealingGate {
    last: Mutex<Option<(Instant, bool)>>,
}

impl SealingGate {
    pub(crate) async fn every_node_opens(&self, coord: &Coord) -> bool {
        if let Some((at, answer)) = *self.last.lock().expect("sealing gate lock")
            && at.elapsed() < RECHECK
        {
            return answer;
        }
        let answer = match coord.nodes_live().await {
            Ok(nodes) => {
                let older = nodes.iter().filter(|n| !n.opens_sealed_secrets).count();
                if older > 0 {
                    tracing::warn!(
                        nodes = older,
                        "nodes of an earlier release serve: secret_env is stored unsealed until every node opens sealed values"
                    );
                }
                older == 0
            }
            // Redis cannot say: sealed, as this release does alone.
            Err(_) => true,
        };
        *self.last.lock().expect("sealing gate lock") = Some((Instant::now(), answer));
        answer
    }
}
