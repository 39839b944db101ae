//! The fault schedule: node kills (SIGKILL, then a restart on the same port), runner kills
//! (SIGKILL, then a restart with the same identity and a new boot id), Redis restarts
//! (alternately keeping and losing its data) and node pauses (SIGSTOP past the TTL, then
//! SIGCONT). The minimum counts asked for are guaranteed; the rest is drawn at random.

use super::cluster::ChaosCluster;
use super::{CLEANER_INTERVAL_MS, ChaosArgs, NODE_TTL_MS};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillNode,
    KillRunner,
    RestartRedis,
    PauseNode,
}

/// What happened, for the report and the checks.
#[derive(Debug, Clone, Default)]
pub struct FaultLog {
    pub node_kills: u32,
    pub runner_kills: u32,
    pub redis_restarts: u32,
    pub redis_restarts_losing_data: u32,
    pub node_pauses: u32,
    /// How long each orphaned set of claims took to be adopted after its node died.
    pub adoptions: Vec<Duration>,
    pub errors: Vec<String>,
}

/// Orphans must be adopted within `node_ttl + cleaner_interval`; on this small shared
/// machine, three times that before it counts as a violation.
pub fn adoption_limit() -> Duration {
    Duration::from_millis(3 * (NODE_TTL_MS + CLEANER_INTERVAL_MS))
}

fn schedule(args: &ChaosArgs, rng: &mut StdRng) -> Vec<Fault> {
    let slots = ((args.duration_s as f64) / args.fault_every_s)
        .floor()
        .max(1.0) as usize;
    let mut plan: Vec<Fault> = std::iter::repeat_n(Fault::KillNode, args.min_node_kills as usize)
        .chain(std::iter::repeat_n(
            Fault::RestartRedis,
            args.min_redis_restarts as usize,
        ))
        .collect();
    while plan.len() < slots {
        plan.push(match rng.random_range(0..10) {
            0..=3 => Fault::KillNode,
            4..=6 => Fault::KillRunner,
            7 => Fault::RestartRedis,
            _ => Fault::PauseNode,
        });
    }
    plan.shuffle(rng);
    plan
}

pub async fn run(
    args: &ChaosArgs,
    seed: u64,
    cluster: &mut ChaosCluster,
    duration: Duration,
) -> FaultLog {
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = schedule(args, &mut rng);
    let every = duration / plan.len() as u32;
    let mut log = FaultLog::default();
    let mut adoptions = Vec::new();
    let started = Instant::now();
    for (i, fault) in plan.into_iter().enumerate() {
        tokio::time::sleep_until((started + every * i as u32 + every / 2).into()).await;
        let result = apply(fault, cluster, &mut rng, &mut log, &mut adoptions).await;
        if let Err(e) = result {
            log.errors.push(format!("{fault:?}: {e:#}"));
        }
    }
    for adoption in adoptions {
        match adoption.await {
            Ok(Some(took)) => log.adoptions.push(took),
            Ok(None) => {}
            Err(e) => log.errors.push(format!("adoption watch: {e}")),
        }
    }
    log
}

async fn apply(
    fault: Fault,
    cluster: &mut ChaosCluster,
    rng: &mut StdRng,
    log: &mut FaultLog,
    adoptions: &mut Vec<tokio::task::JoinHandle<Option<Duration>>>,
) -> anyhow::Result<()> {
    match fault {
        Fault::KillNode => {
            let index = rng.random_range(0..cluster.nodes.len());
            let id = cluster.node_id(index).await;
            cluster.kill_node(index).await;
            let killed = Instant::now();
            log.node_kills += 1;
            println!(
                "  killed node {} ({})",
                index + 1,
                id.as_deref().unwrap_or("?")
            );
            if let Some(id) = id {
                adoptions.push(tokio::spawn(watch_adoption(
                    cluster.coord.clone(),
                    id,
                    killed,
                )));
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
            cluster.start_node(index).await?;
        }
        Fault::KillRunner => {
            let index = rng.random_range(0..cluster.runners.len());
            cluster.kill_runner(index).await;
            log.runner_kills += 1;
            println!("  killed runner {}", index + 1);
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
            cluster.start_runner(index)?;
        }
        Fault::RestartRedis => {
            // Alternate: keep the data (a restart that reloads its snapshot), lose it.
            let keep = log.redis_restarts.is_multiple_of(2);
            cluster.restart_redis(keep).await?;
            log.redis_restarts += 1;
            if !keep {
                log.redis_restarts_losing_data += 1;
            }
            println!(
                "  restarted redis ({})",
                if keep {
                    "data kept up to a snapshot"
                } else {
                    "data lost"
                }
            );
        }
        Fault::PauseNode => {
            let index = rng.random_range(0..cluster.nodes.len());
            cluster.pause_node(index, true);
            log.node_pauses += 1;
            println!("  paused node {} past its TTL", index + 1);
            tokio::time::sleep(Duration::from_millis(NODE_TTL_MS * 2)).await;
            cluster.pause_node(index, false);
        }
    }
    Ok(())
}

/// How long the dead node's claims took to be taken over (`None` if it held none).
async fn watch_adoption(
    coord: baton_coord::Coord,
    node: String,
    killed: Instant,
) -> Option<Duration> {
    let limit = adoption_limit() * 4;
    let mut held_any = false;
    while killed.elapsed() < limit {
        match coord.claims_count(&node).await {
            Ok(0) if held_any => return Some(killed.elapsed()),
            Ok(0) => return None,
            Ok(_) => held_any = true,
            Err(_) => {} // Redis may be restarting: look again
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(killed.elapsed())
}
