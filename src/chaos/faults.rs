//! The fault schedule: node kills (SIGKILL, then a restart on the same port), runner kills
//! (SIGKILL, then a restart with the same identity and a new boot id), Redis restarts
//! (alternately keeping and losing its data), node pauses (SIGSTOP past the TTL, then
//! SIGCONT), and faults of the links between processes, each through its fault proxy: a
//! runner cut from every node while its tasks run on, one node cut from Redis only or
//! from Postgres only, a link that carries one direction only, a slow link (latency past
//! the store timeouts), and a Postgres outage of every node longer than
//! `runner_lost_after`. The kinds are chosen by `--faults`; each chosen kind happens at
//! least once and the minimum counts asked for are guaranteed; the rest is drawn at
//! random from the seed.

use super::cluster::ChaosCluster;
use super::stores::{PostgresMode, RedisMode};
use super::{CLEANER_INTERVAL_MS, ChaosArgs, NODE_TTL_MS, RUNNER_LOST_AFTER_S};
use baton_localcluster::fault_proxy::{Direction, FaultProxy, Link};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

// No node's wall clock is judged against another's: every time one node writes and
// another judges is read from the cluster's clock (Redis's, `ClusterClock`), so node 1's
// offset goes to a minute either way. A runner's wall clock is never compared with
// anything, so its offset goes to hours either way.

/// The largest offset a node's wall clock is given: far past every threshold of the drill
/// (`runner_lost_after` is 14 s), which would all break if a node's own clock entered.
pub const NODE_SKEW_S: f64 = 60.0;
/// A runner's clock may be anywhere.
pub const RUNNER_SKEW_S: f64 = 2.0 * 3600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    KillNode,
    KillRunner,
    RestartRedis,
    PauseNode,
    CutRunner,
    CutNodeRedis,
    CutNodePostgres,
    OneWay,
    SlowLink,
    PostgresOutage,
    ClockStep,
    /// Redis behind Sentinel or as a Cluster: its master killed, or failed over by hand.
    FailoverRedis,
    /// Postgres under pg_auto_failover: its primary killed, or failed over by hand.
    FailoverPostgres,
}

impl Fault {
    pub const ALL: [Fault; 13] = [
        Fault::KillNode,
        Fault::KillRunner,
        Fault::RestartRedis,
        Fault::PauseNode,
        Fault::CutRunner,
        Fault::CutNodeRedis,
        Fault::CutNodePostgres,
        Fault::OneWay,
        Fault::SlowLink,
        Fault::PostgresOutage,
        Fault::ClockStep,
        Fault::FailoverRedis,
        Fault::FailoverPostgres,
    ];

    /// Whether the drill's stores allow this kind: a single Redis is restarted and cut
    /// off, Sentinel and Cluster fail over (their nodes are reached directly, not through
    /// a proxy); a single Postgres cannot fail over.
    pub fn applies_to(self, redis: RedisMode, postgres: PostgresMode) -> bool {
        match self {
            Fault::RestartRedis | Fault::CutNodeRedis => redis == RedisMode::Single,
            Fault::FailoverRedis => redis != RedisMode::Single,
            Fault::FailoverPostgres => postgres == PostgresMode::Failover,
            _ => true,
        }
    }

    /// How often a kind is drawn, relative to the others.
    fn weight(self) -> u32 {
        match self {
            Fault::KillNode => 4,
            Fault::KillRunner | Fault::CutRunner => 3,
            Fault::CutNodeRedis | Fault::CutNodePostgres | Fault::OneWay | Fault::SlowLink => 2,
            Fault::RestartRedis | Fault::PauseNode | Fault::ClockStep => 1,
            // Long by nature: rare.
            Fault::PostgresOutage => 1,
            Fault::FailoverRedis | Fault::FailoverPostgres => 2,
        }
    }
}

/// What happened, for the report and the checks.
#[derive(Debug, Clone, Default)]
pub struct FaultLog {
    pub node_kills: u32,
    pub runner_kills: u32,
    pub redis_restarts: u32,
    pub redis_restarts_losing_data: u32,
    pub node_pauses: u32,
    pub link_faults: u32,
    pub clock_steps: u32,
    /// Failovers of Redis or Postgres, and how long the store took no write in each.
    pub store_failovers: Vec<(String, Duration)>,
    /// Every fault, with when it began (from the start of the faults) and how long it
    /// lasted, for the report.
    pub events: Vec<(Duration, String)>,
    /// How long each orphaned set of claims took to be adopted after its node died.
    pub adoptions: Vec<Duration>,
    pub errors: Vec<String>,
}

/// The promise (design.md invariant 5): a dead node's claims are taken over within
/// `node_ttl + cleaner_interval`, plus a second for the watcher's own look and the
/// take-over script's round trips.
pub fn adoption_limit() -> Duration {
    Duration::from_millis(NODE_TTL_MS + CLEANER_INTERVAL_MS + 1000)
}

fn schedule(args: &ChaosArgs, rng: &mut StdRng) -> Vec<Fault> {
    let slots = ((args.duration_s as f64) / args.fault_every_s)
        .floor()
        .max(1.0) as usize;
    let chosen = |f: Fault| args.faults.contains(&f);
    let mut plan: Vec<Fault> = args.faults.clone();
    plan.dedup();
    let at_least = |plan: &mut Vec<Fault>, fault: Fault, n: u32| {
        let have = plan.iter().filter(|f| **f == fault).count();
        if chosen(fault) {
            plan.extend(std::iter::repeat_n(
                fault,
                (n as usize).saturating_sub(have),
            ));
        }
    };
    at_least(&mut plan, Fault::KillNode, args.min_node_kills);
    at_least(&mut plan, Fault::RestartRedis, args.min_redis_restarts);
    at_least(&mut plan, Fault::FailoverRedis, args.min_store_failovers);
    at_least(&mut plan, Fault::FailoverPostgres, args.min_store_failovers);
    let total: u32 = args.faults.iter().map(|f| f.weight()).sum();
    while plan.len() < slots && total > 0 {
        let mut draw = rng.random_range(0..total);
        for fault in &args.faults {
            if draw < fault.weight() {
                plan.push(*fault);
                break;
            }
            draw -= fault.weight();
        }
    }
    plan.shuffle(rng);
    plan
}

/// Sets `link` now and opens it again after `lasting`, unless another fault changed it
/// meanwhile.
fn for_a_while(link: &Arc<FaultProxy>, set: Link, lasting: Duration) {
    let change = link.set(set);
    let link = link.clone();
    tokio::spawn(async move {
        tokio::time::sleep(lasting).await;
        link.open_if_still(change);
    });
}

/// The same for each of `links` (a node's links to every Postgres server).
fn all_for_a_while(links: &[Arc<FaultProxy>], set: Link, lasting: Duration) {
    for link in links {
        for_a_while(link, set, lasting);
    }
}

fn secs(rng: &mut StdRng, from: f64, to: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(from..to))
}

/// Runs the schedule for `duration`. `refused` counts the submits the load has had
/// refused so far, for each store failover's report.
pub async fn run(
    args: &ChaosArgs,
    seed: u64,
    cluster: &mut ChaosCluster,
    duration: Duration,
    refused: &(dyn Fn() -> u64 + Sync),
) -> FaultLog {
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = schedule(args, &mut rng);
    let every = duration / plan.len() as u32;
    let mut log = FaultLog::default();
    let mut adoptions = Vec::new();
    let started = Instant::now();
    for (i, fault) in plan.into_iter().enumerate() {
        tokio::time::sleep_until((started + every * i as u32 + every / 2).into()).await;
        let at = started.elapsed();
        let result = apply(fault, cluster, &mut rng, &mut log, &mut adoptions, refused).await;
        match result {
            Ok(what) => log.events.push((at, what)),
            Err(e) => log.errors.push(format!("{fault:?}: {e:#}")),
        }
    }
    // Each kill's recovery goes on its own line of the report.
    for (event, adoption) in adoptions {
        let recovery = match adoption.await {
            Ok(Some(took)) => {
                log.adoptions.push(took);
                format!("; its claims adopted {:.1} s later", took.as_secs_f64())
            }
            Ok(None) => "; it held no claims".to_string(),
            Err(e) => {
                log.errors.push(format!("adoption watch: {e}"));
                continue;
            }
        };
        if let Some((_, what)) = log.events.get_mut(event) {
            what.push_str(&recovery);
        }
    }
    log
}

/// Injects one fault; says what it did.
async fn apply(
    fault: Fault,
    cluster: &mut ChaosCluster,
    rng: &mut StdRng,
    log: &mut FaultLog,
    adoptions: &mut Vec<(usize, tokio::task::JoinHandle<Option<Duration>>)>,
    refused: &(dyn Fn() -> u64 + Sync),
) -> anyhow::Result<String> {
    let what = match fault {
        Fault::KillNode => {
            let index = rng.random_range(0..cluster.nodes.len());
            let id = cluster.node_id(index).await;
            cluster.kill_node(index).await;
            let killed = Instant::now();
            log.node_kills += 1;
            let said = format!(
                "killed node {} ({}) and started it again",
                index + 1,
                id.as_deref().unwrap_or("?")
            );
            if let Some(id) = id {
                // This fault's line in the report is the next one.
                let event = log.events.len();
                adoptions.push((
                    event,
                    tokio::spawn(watch_adoption(cluster.coord.clone(), id, killed)),
                ));
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
            cluster.start_node(index).await?;
            said
        }
        Fault::KillRunner => {
            let index = rng.random_range(0..cluster.runners.len());
            cluster.kill_runner(index).await;
            log.runner_kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
            cluster.start_runner(index)?;
            format!("killed runner {} and started it again", index + 1)
        }
        Fault::RestartRedis => {
            // Alternate: keep the data (a restart that reloads its snapshot), lose it.
            let keep = log.redis_restarts.is_multiple_of(2);
            let work = cluster.work().clone();
            cluster.redis.restart_single(&work, keep).await?;
            log.redis_restarts += 1;
            if !keep {
                log.redis_restarts_losing_data += 1;
            }
            format!(
                "restarted redis ({})",
                if keep {
                    "data kept up to a snapshot"
                } else {
                    "data lost"
                }
            )
        }
        Fault::PauseNode => {
            let index = rng.random_range(0..cluster.nodes.len());
            cluster.pause_node(index, true);
            log.node_pauses += 1;
            tokio::time::sleep(Duration::from_millis(NODE_TTL_MS * 2)).await;
            cluster.pause_node(index, false);
            format!("paused node {} past its TTL", index + 1)
        }
        Fault::CutRunner => {
            // From shorter than the fence to longer than the lost threshold.
            let index = rng.random_range(0..cluster.runners.len());
            let lasting = secs(rng, 3.0, RUNNER_LOST_AFTER_S as f64 + 4.0);
            for_a_while(&cluster.runners[index].link, Link::Cut, lasting);
            log.link_faults += 1;
            format!(
                "cut runner {} from every node for {:.1} s (its tasks run on)",
                index + 1,
                lasting.as_secs_f64()
            )
        }
        Fault::CutNodeRedis | Fault::CutNodePostgres => {
            let index = rng.random_range(0..cluster.nodes.len());
            let slot = &cluster.nodes[index];
            let (links, store) = if fault == Fault::CutNodeRedis {
                (slot.redis_link.iter().cloned().collect(), "Redis")
            } else {
                (slot.postgres_links.clone(), "Postgres")
            };
            let lasting = secs(rng, 2.0, 9.0);
            all_for_a_while(&links, Link::Cut, lasting);
            log.link_faults += 1;
            format!(
                "cut node {} from {store} only for {:.1} s",
                index + 1,
                lasting.as_secs_f64()
            )
        }
        Fault::OneWay => {
            let (links, name) = any_link(cluster, rng);
            let (way, said) = if rng.random_bool(0.5) {
                (Direction::ToUpstream, "requests pass, answers are lost")
            } else {
                (Direction::ToClient, "requests are lost")
            };
            let lasting = secs(rng, 2.0, 9.0);
            all_for_a_while(&links, Link::OnlyTo(way), lasting);
            log.link_faults += 1;
            format!(
                "{name} one way only ({said}) for {:.1} s",
                lasting.as_secs_f64()
            )
        }
        Fault::SlowLink => {
            let (links, name) = any_link(cluster, rng);
            let delay = Duration::from_millis(rng.random_range(300..3000));
            let jitter = Duration::from_millis(rng.random_range(0..500));
            let lasting = secs(rng, 3.0, 9.0);
            all_for_a_while(&links, Link::Slow { delay, jitter }, lasting);
            log.link_faults += 1;
            format!(
                "{name} slowed by {} ms ± {} ms for {:.1} s",
                delay.as_millis(),
                jitter.as_millis(),
                lasting.as_secs_f64()
            )
        }
        Fault::PostgresOutage => {
            // Longer than runner_lost_after, with tasks running throughout.
            let lasting = Duration::from_secs(RUNNER_LOST_AFTER_S + 4);
            for slot in &cluster.nodes {
                all_for_a_while(&slot.postgres_links, Link::Cut, lasting);
            }
            log.link_faults += 1;
            format!(
                "cut every node from Postgres for {:.0} s (longer than runner_lost_after)",
                lasting.as_secs_f64()
            )
        }
        Fault::ClockStep => {
            let Some(clocks) = &cluster.clocks else {
                return Ok("clock step left out: libfaketime is not installed".into());
            };
            let (clock, whose, bound) = if rng.random_bool(0.5) {
                (&clocks.node, "node 1", NODE_SKEW_S)
            } else {
                (&clocks.runner, "runner 1", RUNNER_SKEW_S)
            };
            let offset = rng.random_range(-bound..bound);
            clock.set(offset)?;
            log.clock_steps += 1;
            format!("stepped {whose}'s wall clock to {offset:+.2} s from the real time")
        }
        Fault::FailoverRedis | Fault::FailoverPostgres => {
            // Alternate: the master or primary killed, then a failover asked for by hand.
            let by_hand = log.store_failovers.len() % 2 == 1;
            let before = refused();
            let (what, took) = if fault == Fault::FailoverRedis {
                cluster.redis.fail_over(by_hand).await?
            } else {
                cluster.postgres.fail_over(by_hand).await?
            };
            log.store_failovers.push((what.clone(), took));
            format!(
                "{what}: writable again after {:.1} s, {} submits refused meanwhile",
                took.as_secs_f64(),
                refused() - before
            )
        }
    };
    println!("  {what}");
    Ok(what)
}

/// A link drawn at random: a node's to Redis (a single one) or to Postgres (every server
/// it names), or a runner's.
fn any_link(cluster: &ChaosCluster, rng: &mut StdRng) -> (Vec<Arc<FaultProxy>>, String) {
    let mut links: Vec<(Vec<Arc<FaultProxy>>, String)> = Vec::new();
    for (index, slot) in cluster.nodes.iter().enumerate() {
        if let Some(redis) = &slot.redis_link {
            links.push((
                vec![redis.clone()],
                format!("node {}'s Redis link", index + 1),
            ));
        }
        links.push((
            slot.postgres_links.clone(),
            format!("node {}'s Postgres link", index + 1),
        ));
    }
    for (index, slot) in cluster.runners.iter().enumerate() {
        links.push((
            vec![slot.link.clone()],
            format!("runner {}'s link", index + 1),
        ));
    }
    links.swap_remove(rng.random_range(0..links.len()))
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
