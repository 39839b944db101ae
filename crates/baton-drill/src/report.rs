//! The drill's report: what ran, what was broken, how it recovered, and the verdict.

use super::faults::{FaultLog, adoption_limit};
use std::time::Duration;

/// How many violations the printed report lists.
const SHOWN: usize = 50;

/// Everything a run of the drill prints at its end.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub duration: Duration,
    pub accepted: usize,
    pub submit_retries: u64,
    pub by_status: Vec<(String, i64)>,
    pub retried: i64,
    pub runs: usize,
    pub runs_cut_short: usize,
    pub webhooks: (usize, u32, u32),
    pub faults: FaultLog,
    pub settled_after: Option<Duration>,
    pub schedule: super::schedules::ScheduleOutcome,
    pub on_demand: super::on_demand::OnDemand,
    pub pipelines: super::pipelines::PipelineOutcome,
    pub checks: Vec<(&'static str, bool)>,
    pub violations: Vec<String>,
}

impl Report {
    pub fn print(&self) {
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        println!("\nbaton chaos report");
        println!(
            "  duration     {} of faults, seed {}",
            secs(self.duration),
            self.seed
        );
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        println!(
            "  tasks        {} accepted ({} submits retried): {}",
            self.accepted,
            self.submit_retries,
            statuses.join(", ")
        );
        println!("  retries      {} tasks ran more than once", self.retried);
        let p = &self.pipelines;
        println!(
            "  pipelines    {} submitted, {} jobs ({} skipped by their rule)",
            p.pipelines, p.jobs, p.skipped
        );
        let d = &self.on_demand;
        println!(
            "  on demand    {} tasks, {} runners started for them ({} assignments, {} attempts failed)",
            d.tasks, d.runners_started, d.assignments, d.failed_attempts
        );
        println!(
            "  runs         {} recorded, {} cut short by a kill",
            self.runs, self.runs_cut_short
        );
        let f = &self.faults;
        println!(
            "  faults       {} node kills, {} runner kills, {} redis restarts ({} losing data), {} node pauses, {} link faults, {} clock steps",
            f.node_kills,
            f.runner_kills,
            f.redis_restarts,
            f.redis_restarts_losing_data,
            f.node_pauses,
            f.link_faults,
            f.clock_steps
        );
        for (at, what) in &f.events {
            println!("    {:>7}  {what}", secs(*at));
        }
        if !f.store_failovers.is_empty() {
            let slowest = f
                .store_failovers
                .iter()
                .map(|(_, t)| *t)
                .max()
                .unwrap_or_default();
            println!(
                "  failovers    {} of the stores, slowest writable again after {}",
                f.store_failovers.len(),
                secs(slowest)
            );
        }
        let max_adoption = f.adoptions.iter().max().copied().unwrap_or_default();
        println!(
            "  adoptions    {} orphaned claim sets adopted, slowest {} (limit {})",
            f.adoptions.len(),
            secs(max_adoption),
            secs(adoption_limit())
        );
        let (keys, deliveries, refused) = self.webhooks;
        println!(
            "  webhooks     {keys} delivered ({deliveries} deliveries, {refused} refused on purpose and retried)"
        );
        let s = &self.schedule;
        println!(
            "  schedule     {} ticks fired, {} made twice, {} missing, {} skipped",
            s.ticks, s.doubled, s.missing, s.skipped
        );
        match self.settled_after {
            Some(d) => println!("  recovery     settled {} after the last fault", secs(d)),
            None => println!("  recovery     did not settle"),
        }
        println!("  checks");
        for (name, ok) in &self.checks {
            println!("    {name:<36} {}", if *ok { "ok" } else { "VIOLATED" });
        }
        println!("  violations   {}", self.violations.len());
        for v in self.violations.iter().take(SHOWN) {
            println!("    - {v}");
        }
        if self.violations.len() > SHOWN {
            println!("    … and {} more", self.violations.len() - SHOWN);
        }
    }

    /// The report as JSON, for a program to read (`tests/chaos.rs`): the same facts the
    /// printed report gives, each under its own name.
    pub fn to_json(&self) -> serde_json::Value {
        let secs = |d: &Duration| d.as_secs_f64();
        let f = &self.faults;
        let (delivered, deliveries, refused) = self.webhooks;
        let s = &self.schedule;
        serde_json::json!({
            "seed": self.seed,
            "duration_s": secs(&self.duration),
            "accepted": self.accepted,
            "submit_retries": self.submit_retries,
            "by_status": self.by_status.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "retried": self.retried,
            "runs": self.runs,
            "runs_cut_short": self.runs_cut_short,
            "webhooks": {
                "delivered": delivered,
                "deliveries": deliveries,
                "refused": refused,
            },
            "faults": {
                "node_kills": f.node_kills,
                "runner_kills": f.runner_kills,
                "redis_restarts": f.redis_restarts,
                "redis_restarts_losing_data": f.redis_restarts_losing_data,
                "node_pauses": f.node_pauses,
                "runner_cuts": f.runner_cuts,
                "link_faults": f.link_faults,
                "clock_steps": f.clock_steps,
                "events": f.events.iter().map(|(at, what)| serde_json::json!({
                    "at_s": secs(at),
                    "what": what,
                })).collect::<Vec<_>>(),
                "store_failovers": f.store_failovers.iter().map(|(store, took)| serde_json::json!({
                    "store": store,
                    "writable_after_s": secs(took),
                })).collect::<Vec<_>>(),
                "adoptions_s": f.adoptions.iter().map(secs).collect::<Vec<_>>(),
                "adoption_limit_s": secs(&adoption_limit()),
                "errors": f.errors,
            },
            "schedule": {
                "ticks": s.ticks,
                "doubled": s.doubled,
                "missing": s.missing,
                "skipped": s.skipped,
            },
            "pipelines": {
                "submitted": self.pipelines.pipelines,
                "jobs": self.pipelines.jobs,
                "skipped": self.pipelines.skipped,
            },
            "settled_after_s": self.settled_after.as_ref().map(secs),
            "checks": self.checks.iter().map(|(name, ok)| (name.to_string(), *ok)).collect::<std::collections::BTreeMap<_, _>>(),
            "violations": self.violations,
        })
    }

    /// Every violation, one a line, in `path` (the report shows the first [`SHOWN`]):
    /// an hour's soak that did not settle lists hundreds, and the kinds past the first
    /// screen are what tells a backlog from a broken promise.
    pub fn write_violations(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut all = self.violations.join("\n");
        all.push('\n');
        std::fs::write(path, all)
    }
}
