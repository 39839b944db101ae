//! The fault schedule: node kills (SIGKILL, then a restart on the same port), a node
//! started to die right after its first commit (the load balancer resends what it was
//! asked), runner kills (SIGKILL, then a restart with the same identity and a new boot
//! id), Redis restarts (alternately keeping and losing its data), Redis and Postgres
//! failovers (a Redis master killed after its replica was held back, so its last writes
//! are lost), node pauses (SIGSTOP past the TTL, or past `forgotten_run_after` and the
//! runners' fence, then SIGCONT), and faults of the links between processes, each through
//! its fault proxy: a runner cut from every node while its tasks run on (below the
//! timeout grace, between the grace and the fence, or past the lost threshold), one node
//! cut from Redis only or from Postgres only, a link that carries one direction only, a
//! slow link (latency past the store timeouts, or a runner's past the timeout grace), and
//! a Postgres outage of every node longer than `runner_lost_after`. The kinds are chosen
//! by `--faults`; each chosen kind happens at least once, each length of a pause and of a
//! cut too, and the minimum counts asked for are guaranteed; the rest is drawn at random
//! from the seed, one every `--fault-every-s`, until the duration is over. Each fault's window (what it touched, from when to when) goes into the
//! log, for the checker to match the ends of runs to their causes (`causes.rs`).

use super::causes::{Cause, FaultWindow, unix_now};
use super::cluster::ChaosCluster;
use super::stores::{PostgresMode, RedisMode};
use super::{
    CLEANER_INTERVAL_MS, ChaosArgs, NODE_TTL_MS, RUNNER_FENCE_AFTER_S, RUNNER_LOST_AFTER_S, TIMINGS,
};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
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
    /// A node started with `--fault abort-after-commit`: it dies right after its first
    /// group commit, before answering, and the load balancer resends what it was asked
    /// (unmarked) to another node; then it is started again as it was.
    AbortAfterCommit,
}

impl Fault {
    pub const ALL: [Fault; 14] = [
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
        Fault::AbortAfterCommit,
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
            Fault::AbortAfterCommit => 1,
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
    /// Runners cut off, for turning through the bands of their thresholds.
    pub runner_cuts: u32,
    pub link_faults: u32,
    pub clock_steps: u32,
    /// Failovers of Redis or Postgres, and how long the store took no write in each.
    pub store_failovers: Vec<(String, Duration)>,
    /// Every fault, with when it began (from the start of the faults) and how long it
    /// lasted, for the report.
    pub events: Vec<(Duration, String)>,
    /// How long each orphaned set of claims took to be adopted after its node died.
    pub adoptions: Vec<Duration>,
    /// What each fault touched and when, for matching the ends of runs to their causes.
    pub windows: Vec<FaultWindow>,
    pub errors: Vec<String>,
}

impl FaultLog {
    /// A fault of links: counted once, however many links it touched, with its window
    /// from now until what it touched stops feeling it (`felt_for`).
    fn link_fault(&mut self, cause: Cause, felt_for: Duration) {
        self.link_faults += 1;
        self.windows.push(FaultWindow::from_now(cause, felt_for));
    }
}

/// The promise (design.md invariant 5): a dead node's claims are taken over within
/// `node_ttl + cleaner_interval`, plus a second for the watcher's own look and the
/// take-over script's round trips.
pub fn adoption_limit() -> Duration {
    Duration::from_millis(NODE_TTL_MS + CLEANER_INTERVAL_MS + 1000)
}

/// How many of `fault` a drill promises: one of each kind chosen, and the minimums asked
/// for or needed to turn through each length of a pause and of a runner's cut.
fn at_least_of(args: &ChaosArgs, fault: Fault) -> u32 {
    if !args.faults.contains(&fault) {
        return 0;
    }
    let asked = match fault {
        Fault::KillNode => args.min_node_kills,
        Fault::RestartRedis => args.min_redis_restarts,
        Fault::FailoverRedis | Fault::FailoverPostgres => args.min_store_failovers,
        Fault::PauseNode => 2,
        Fault::CutRunner => 3,
        _ => 1,
    };
    asked.max(1)
}

fn schedule(args: &ChaosArgs, rng: &mut StdRng) -> Vec<Fault> {
    let slots = ((args.duration_s as f64) / args.fault_every_s)
        .floor()
        .max(1.0) as usize;
    let mut plan: Vec<Fault> = Vec::new();
    for fault in Fault::ALL {
        plan.extend(std::iter::repeat_n(
            fault,
            at_least_of(args, fault) as usize,
        ));
    }
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
    let mut done: std::collections::HashMap<Fault, u32> = std::collections::HashMap::new();
    for (i, fault) in plan.into_iter().enumerate() {
        tokio::time::sleep_until((started + every * i as u32 + every / 2).into()).await;
        let at = started.elapsed();
        // Long faults (a pause, a failover) run past their slot: once the duration is
        // over, only what each kind was promised still happens, so the drill lasts about
        // what it was asked.
        let so_far = done.entry(fault).or_default();
        if at > duration && *so_far >= at_least_of(args, fault) {
            continue;
        }
        *so_far += 1;
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

/// How long a node is paused: past its TTL (its claims adopted while it sleeps), or
/// further, past `forgotten_run_after_s` and the runners' fence (an answer it owed a runner
/// comes back too late to be started, and the run is ended as forgotten) — alternately.
fn pause_lasting(pauses_so_far: u32, rng: &mut StdRng) -> Duration {
    if pauses_so_far.is_multiple_of(2) {
        Duration::from_millis(NODE_TTL_MS * 2)
    } else {
        let forgotten = baton_server::config::ServeConfig::default()
            .timings
            .forgotten_run_after_s as f64;
        secs(rng, forgotten + 1.0, forgotten + 5.0)
    }
}

/// How long a runner is cut off, from the three bands of its thresholds, in turn: below
/// the server's timeout grace; between the grace and the runner's fence (its runs go on,
/// a deadline may pass while it is unheard, and it must not be called timed out for
/// that); past the lost threshold (it fences, and its runs are ended and retried).
fn cut_lasting(cuts_so_far: u32, rng: &mut StdRng) -> (Duration, &'static str) {
    let grace = TIMINGS.timeout_grace_s as f64;
    let fence = RUNNER_FENCE_AFTER_S as f64;
    let lost = RUNNER_LOST_AFTER_S as f64;
    match cuts_so_far % 3 {
        0 => (
            secs(rng, 1.0, grace - 0.5),
            "shorter than the timeout grace",
        ),
        1 => (
            secs(rng, grace + 0.3, fence - 0.3),
            "between the timeout grace and the fence",
        ),
        _ => (
            secs(rng, lost + 1.0, lost + 4.0),
            "longer than runner_lost_after",
        ),
    }
}

/// Injects one fault; says what it did, and records what it touched and when.
async fn apply(
    fault: Fault,
    cluster: &mut ChaosCluster,
    rng: &mut StdRng,
    log: &mut FaultLog,
    adoptions: &mut Vec<(usize, tokio::task::JoinHandle<Option<Duration>>)>,
    refused: &(dyn Fn() -> u64 + Sync),
) -> anyhow::Result<String> {
    let began = unix_now();
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
            let started = cluster.start_node(index).await;
            log.windows
                .push(FaultWindow::until_now(Cause::Node(index), began));
            started?;
            said
        }
        Fault::AbortAfterCommit => {
            let index = rng.random_range(0..cluster.nodes.len());
            cluster.kill_node(index).await;
            log.node_kills += 1;
            // It dies at its first commit — a start, a submit, a run's end, whichever it
            // is sent first — which may come before it is seen ready.
            let _ = cluster
                .start_node_with(index, &["--fault", "abort-after-commit"])
                .await;
            let died = cluster.node_exited(index, Duration::from_secs(20)).await;
            cluster.kill_node(index).await;
            let started = cluster.start_node(index).await;
            log.windows
                .push(FaultWindow::until_now(Cause::Node(index), began));
            started?;
            if died {
                format!(
                    "node {} started to die after its first commit, and started again",
                    index + 1
                )
            } else {
                format!(
                    "node {} started to die after its first commit made none in 20 s; started again",
                    index + 1
                )
            }
        }
        Fault::KillRunner => {
            let index = rng.random_range(0..cluster.runners.len());
            cluster.kill_runner(index).await;
            log.runner_kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
            log.windows
                .push(FaultWindow::until_now(Cause::RunnerKilled(index), began));
            cluster.start_runner(index)?;
            format!("killed runner {} and started it again", index + 1)
        }
        Fault::RestartRedis => {
            // Alternate: keep the data (a restart that reloads its snapshot), lose it.
            let keep = log.redis_restarts.is_multiple_of(2);
            let work = cluster.work().clone();
            let restarted = cluster.redis.restart_single(&work, keep).await;
            log.windows
                .push(FaultWindow::until_now(Cause::Stores, began));
            restarted?;
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
            let lasting = pause_lasting(log.node_pauses, rng);
            cluster.pause_node(index, true);
            log.node_pauses += 1;
            tokio::time::sleep(lasting).await;
            cluster.pause_node(index, false);
            log.windows
                .push(FaultWindow::until_now(Cause::NodeFrozen(index), began));
            format!(
                "paused node {} for {:.1} s (past its TTL{})",
                index + 1,
                lasting.as_secs_f64(),
                if lasting > Duration::from_secs(RUNNER_FENCE_AFTER_S) {
                    ", forgotten_run_after and the runners' fence"
                } else {
                    ""
                }
            )
        }
        Fault::CutRunner => {
            let index = rng.random_range(0..cluster.runners.len());
            let cuts = log.runner_cuts;
            let (lasting, band) = cut_lasting(cuts, rng);
            for_a_while(&cluster.runners[index].link, Link::Cut, lasting);
            log.runner_cuts += 1;
            log.link_fault(Cause::RunnerLink(index), lasting);
            format!(
                "cut runner {} from every node for {:.1} s, {band} (its tasks run on)",
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
            log.link_fault(Cause::Node(index), lasting);
            format!(
                "cut node {} from {store} only for {:.1} s",
                index + 1,
                lasting.as_secs_f64()
            )
        }
        Fault::OneWay => {
            let (links, name, cause) = any_link(cluster, rng);
            let (way, said) = if rng.random_bool(0.5) {
                (Direction::ToUpstream, "requests pass, answers are lost")
            } else {
                (Direction::ToClient, "requests are lost")
            };
            let lasting = secs(rng, 2.0, 9.0);
            all_for_a_while(&links, Link::OnlyTo(way), lasting);
            log.link_fault(cause, lasting);
            format!(
                "{name} one way only ({said}) for {:.1} s",
                lasting.as_secs_f64()
            )
        }
        Fault::SlowLink => {
            let (links, name, cause) = any_link(cluster, rng);
            // A runner's answers held past the server's timeout grace (and its fence, at
            // the top), in order; a store's past the node's store timeouts.
            let most = match cause {
                Cause::RunnerLink(_) => (TIMINGS.timeout_grace_s + 3) * 1000,
                _ => 3000,
            };
            let delay = Duration::from_millis(rng.random_range(300..most));
            let jitter = Duration::from_millis(rng.random_range(0..500));
            let lasting = secs(rng, 3.0, 9.0);
            all_for_a_while(&links, Link::Slow { delay, jitter }, lasting);
            // What was sent at its end still arrives `delay` later.
            log.link_fault(cause, lasting + delay + jitter);
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
            log.link_fault(Cause::Stores, lasting);
            format!(
                "cut every node from Postgres for {:.0} s (longer than runner_lost_after)",
                lasting.as_secs_f64()
            )
        }
        Fault::ClockStep => {
            // No window: no verdict may follow from a clock (see the consts above).
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
            let failed_over = if fault == Fault::FailoverRedis {
                cluster.redis.fail_over(by_hand).await
            } else {
                cluster.postgres.fail_over(by_hand).await
            };
            log.windows
                .push(FaultWindow::until_now(Cause::Stores, began));
            let (what, took) = failed_over?;
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
/// it names), or a runner's; with what its fault touches.
fn any_link(cluster: &ChaosCluster, rng: &mut StdRng) -> (Vec<Arc<FaultProxy>>, String, Cause) {
    let mut links: Vec<(Vec<Arc<FaultProxy>>, String, Cause)> = Vec::new();
    for (index, slot) in cluster.nodes.iter().enumerate() {
        if let Some(redis) = &slot.redis_link {
            links.push((
                vec![redis.clone()],
                format!("node {}'s Redis link", index + 1),
                Cause::Node(index),
            ));
        }
        links.push((
            slot.postgres_links.clone(),
            format!("node {}'s Postgres link", index + 1),
            Cause::Node(index),
        ));
    }
    for (index, slot) in cluster.runners.iter().enumerate() {
        links.push((
            vec![slot.link.clone()],
            format!("runner {}'s link", index + 1),
            Cause::RunnerLink(index),
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
