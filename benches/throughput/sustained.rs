//! Sustained load (`--only sustained`): does the rate hold for half an hour, with the
//! finished tasks kept 10 minutes and deleted by the janitor as production does?
//!
//! The nodes run with `--retention-s 600`. A first drain measures the peak; then one
//! client submits at 70 % of it (a batch every 100 ms, through nginx) for
//! `BATON_BENCH_SUSTAINED_S` seconds (1,800 by default) while two protocol-level runners
//! × 16 drain it. Every interval (a minute; a thirtieth of a shorter run) it prints, and
//! keeps for the curve: tasks submitted and finished per second, the backlog, the size
//! of the tasks table and of its indexes, and the slowest request — a submit, or an
//! exchange that reported work and took over 100 ms (an idle runner's exchange parks on
//! purpose, so it is not a stall; see `protocol_runner.rs`). At the end it prints the
//! verdicts against the targets and writes the curve as an SVG
//! (`BATON_BENCH_PLOT`, `target/tmp/sustained.svg` by default) and the rows as CSV
//! beside it.
//!
//! At 70 % load the finished rate follows the submitted one while the cluster keeps up;
//! a cluster that slowed down shows it as a backlog that grows, so both are printed.

use super::*;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The share of the peak drain the client submits at.
const LOAD: f64 = 0.7;
/// Submits per second (the batch is the rate's tenth).
const SUBMITS_PER_S: u64 = 10;
/// A request slower than this, doing work, is a stall.
const STALL: Duration = Duration::from_secs(1);

/// How long the finished tasks are kept: what the issue names.
pub(crate) const RETENTION_S: &str = "600";
const RETENTION_MIN: f64 = 10.0;

/// One interval of the run.
#[derive(Debug, Clone)]
struct Sample {
    minute: f64,
    submitted_per_s: f64,
    finished_per_s: f64,
    backlog: i64,
    table_mib: f64,
    indexes_mib: f64,
    dead_rows: i64,
    slowest_ms: f64,
}

pub(crate) async fn sustained(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
) {
    let duration = Duration::from_secs(
        std::env::var("BATON_BENCH_SUSTAINED_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1800),
    );
    let interval = Duration::from_secs(60)
        .min(duration / 30)
        .max(Duration::from_secs(5));
    let (_, peak) = protocol_drain(stack, scale, sources, processes, 0).await;
    let rate = peak.rate * LOAD;
    let batch = ((rate / SUBMITS_PER_S as f64).round() as usize).clamp(1, 1000);
    println!(
        "sustained: peak drain {:.0} tasks/s; submitting {} tasks every {} ms ({:.0}/s) for {} s, \
         finished tasks kept {RETENTION_S} s",
        peak.rate,
        batch,
        1000 / SUBMITS_PER_S,
        batch as f64 * SUBMITS_PER_S as f64,
        duration.as_secs()
    );

    let exchange_log = stack.env.dir.join("sustained-exchanges.log");
    let tokens = [
        runner_token(&stack.lb.url).await,
        runner_token(&stack.lb.url).await,
    ];
    let mut runners = protocol_runners(
        &stack.lb.url,
        &tokens,
        &[(protocol_runner::SLOW_EXCHANGES, &exchange_log)],
    );

    let slowest_submit = Arc::new(Mutex::new(Duration::ZERO));
    let submitted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = tokio::spawn(produce(
        stack.lb.url.clone(),
        batch,
        submitted.clone(),
        slowest_submit.clone(),
        stop.clone(),
    ));

    let mut db = stack.env.db().await;
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last = (
        started,
        submitted.load(Ordering::Relaxed),
        chrono::Utc::now(),
    );
    let mut exchanges_read = 0;
    println!(
        "minute  submitted/s  finished/s  backlog  table MiB  indexes MiB  dead rows  slowest ms"
    );
    while started.elapsed() < duration {
        tokio::time::sleep(interval.saturating_sub(last.0.elapsed())).await;
        let now = (
            Instant::now(),
            submitted.load(Ordering::Relaxed),
            chrono::Utc::now(),
        );
        let secs = now.0.duration_since(last.0).as_secs_f64();
        let finished: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM tasks WHERE status IN ({}) AND finished_at > $1 AND finished_at <= $2",
            baton_store::sql_list(baton_core::TaskStatus::TERMINAL)
        )))
        .bind(last.2)
        .bind(now.2)
        .fetch_one(&mut db)
        .await
        .unwrap();
        let backlog: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'queued'")
            .fetch_one(&mut db)
            .await
            .unwrap();
        let (table, indexes, dead): (i64, i64, i64) = sqlx::query_as(
            "SELECT pg_table_size('tasks'), pg_indexes_size('tasks'),
                    (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'tasks')",
        )
        .fetch_one(&mut db)
        .await
        .unwrap();
        let (slowest_exchange, read) = slowest_exchange(&exchange_log, exchanges_read);
        exchanges_read = read;
        let slowest = std::mem::take(&mut *slowest_submit.lock().unwrap()).max(slowest_exchange);
        let sample = Sample {
            minute: now.0.duration_since(started).as_secs_f64() / 60.0,
            submitted_per_s: (now.1 - last.1) as f64 / secs,
            finished_per_s: finished as f64 / secs,
            backlog,
            table_mib: table as f64 / 1048576.0,
            indexes_mib: indexes as f64 / 1048576.0,
            dead_rows: dead,
            slowest_ms: ms(slowest),
        };
        println!(
            "{:6.1}  {:11.0}  {:10.0}  {:7}  {:9.1}  {:11.1}  {:9}  {:10.1}",
            sample.minute,
            sample.submitted_per_s,
            sample.finished_per_s,
            sample.backlog,
            sample.table_mib,
            sample.indexes_mib,
            sample.dead_rows,
            sample.slowest_ms
        );
        samples.push(sample);
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();
    for r in &mut runners {
        let _ = r.kill();
        let _ = r.wait();
    }
    verdicts(&samples);
    let plot = std::env::var_os("BATON_BENCH_PLOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::procs::target_tmp_dir().join("sustained.svg"));
    let csv = plot.with_extension("csv");
    let written = plot
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .map_err(|e| e.to_string())
        .and_then(|()| std::fs::write(&csv, csv_of(&samples)).map_err(|e| e.to_string()))
        .and_then(|()| draw(&plot, &samples, peak.rate));
    match written {
        Ok(()) => println!(
            "sustained: the curve in {}, its rows in {}",
            plot.display(),
            csv.display()
        ),
        Err(e) => eprintln!("sustained: the curve was not written: {e}"),
    }
}

/// Submits `batch` tasks `SUBMITS_PER_S` times a second until told to stop; a tick
/// missed while a submit was slow is made up at once, so the rate holds.
async fn produce(
    url: String,
    batch: usize,
    submitted: Arc<AtomicU64>,
    slowest: Arc<Mutex<Duration>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let client = user_client(&url);
    let tasks = tasks_of("sustained", batch, "true");
    let mut ticks = tokio::time::interval(Duration::from_millis(1000 / SUBMITS_PER_S));
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let sent = Instant::now();
        match client.submit_batch(tasks.clone()).await {
            Ok(_) => {
                submitted.fetch_add(batch as u64, Ordering::Relaxed);
            }
            Err(e) => eprintln!("sustained: a submit failed: {e}"),
        }
        let took = sent.elapsed();
        let mut slowest = slowest.lock().unwrap();
        *slowest = (*slowest).max(took);
    }
}

/// The slowest exchange that carried work among the lines the runners appended since
/// `from` (bytes), and where the file ends now.
fn slowest_exchange(log: &Path, from: usize) -> (Duration, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    // Up to the last whole line: a line being appended is read at the next interval.
    let end = text.rfind('\n').map_or(from, |i| i + 1).max(from);
    let slowest = text
        .get(from..end)
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    (Duration::from_millis(slowest), end)
}

/// The targets: the rate within 10 % of its first interval's, with the backlog
/// not growing (at 70 % load the finished rate follows the submitted one, so a slower
/// cluster shows as backlog); sizes that stop growing once the retention is reached; no
/// stall over a second.
fn verdicts(samples: &[Sample]) {
    let Some(first) = samples.first().filter(|s| s.finished_per_s > 0.0) else {
        println!("sustained: nothing finished in the first interval; no verdict");
        return;
    };
    let worst = samples
        .iter()
        .map(|s| (s.finished_per_s / first.finished_per_s - 1.0) * 100.0)
        .fold(0.0f64, |a, d| if d.abs() > a.abs() { d } else { a });
    let kept_up = samples
        .iter()
        .map(|s| s.finished_per_s / s.submitted_per_s.max(1.0))
        .fold(f64::INFINITY, f64::min);
    let half = samples.len() / 2;
    let most_backlog = |part: &[Sample]| part.iter().map(|s| s.backlog).max().unwrap_or(0);
    println!(
        "sustained: finished {:.0}/s in the first interval, the farthest interval {worst:+.1} % from it \
         [target within 10 %]; finished/submitted at least {kept_up:.3} in every interval; the most \
         backlog {} in the first half, {} in the second",
        first.finished_per_s,
        most_backlog(&samples[..half]),
        most_backlog(&samples[half..])
    );
    // Where the sizes stopped growing: the first interval after which they never pass
    // it by more than 1 % (the table fills while the first retention period is kept,
    // then as vacuum's free space catches up with the janitor's deletes).
    let size = |s: &Sample| s.table_mib + s.indexes_mib;
    let settled = (0..samples.len())
        .find(|&i| {
            samples[i..]
                .iter()
                .all(|later| size(later) <= size(&samples[i]) * 1.01)
        })
        .unwrap_or(samples.len() - 1);
    let (at, end) = (&samples[settled], samples.last().unwrap());
    if settled + 1 < samples.len() {
        println!(
            "sustained: table and indexes stopped growing at minute {:.0} ({:.1} MiB; {:.1} MiB at \
             the end, {:+.1} %) [target: stop growing]",
            at.minute,
            size(at),
            size(end),
            (size(end) / size(at) - 1.0) * 100.0
        );
    } else {
        println!(
            "sustained: table and indexes still growing at the end ({:.1} MiB) [target: stop growing]",
            size(end)
        );
    }
    let slowest = samples.iter().map(|s| s.slowest_ms).fold(0.0, f64::max);
    println!(
        "sustained: slowest request doing work {slowest:.0} ms [target <= {}]",
        STALL.as_millis()
    );
}

fn csv_of(samples: &[Sample]) -> String {
    let mut out = String::from(
        "minute,submitted_per_s,finished_per_s,backlog,table_mib,indexes_mib,dead_rows,slowest_ms\n",
    );
    for s in samples {
        out.push_str(&format!(
            "{:.2},{:.0},{:.0},{},{:.1},{:.1},{},{:.1}\n",
            s.minute,
            s.submitted_per_s,
            s.finished_per_s,
            s.backlog,
            s.table_mib,
            s.indexes_mib,
            s.dead_rows,
            s.slowest_ms
        ));
    }
    out
}

/// Three panels over the run's minutes: the rates, the table's and indexes' sizes, the
/// slowest request.
fn draw(path: &Path, samples: &[Sample], peak: f64) -> Result<(), String> {
    let root = SVGBackend::new(path, (900, 780)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((3, 1));
    let minutes = samples.last().map_or(1.0, |s| s.minute).max(1.0);
    let series = |f: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.minute, f(s))).collect()
    };
    panel(
        &panels[0],
        &format!(
            "Tasks per second (peak drain {peak:.0}/s, submitting at {:.0} %)",
            LOAD * 100.0
        ),
        minutes,
        1.0,
        vec![
            (series(|s| s.submitted_per_s), BLUE, "submitted"),
            (
                series(|s| s.finished_per_s),
                RGBColor(0, 150, 0),
                "finished",
            ),
        ],
    )?;
    panel(
        &panels[1],
        &format!(
            "Tasks table and its indexes, MiB (finished tasks kept {RETENTION_MIN:.0} minutes)"
        ),
        minutes,
        1.0,
        vec![
            (series(|s| s.table_mib), RED, "table"),
            (series(|s| s.indexes_mib), MAGENTA, "indexes"),
        ],
    )?;
    panel(
        &panels[2],
        &format!(
            "Slowest request doing work in each interval, ms (target <= {})",
            STALL.as_millis()
        ),
        minutes,
        100.0,
        vec![(series(|s| s.slowest_ms), BLACK, "slowest request")],
    )?;
    root.present().map_err(|e| e.to_string())
}

/// A line of a panel: its points, colour and name.
type Line<'a> = (Vec<(f64, f64)>, RGBColor, &'a str);

/// One panel: `lines` (points, colour, name) over `minutes`, the y axis from 0 to 15 %
/// above the highest point, or to `least_top` if that is higher, with a legend.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    minutes: f64,
    least_top: f64,
    lines: Vec<Line<'_>>,
) -> Result<(), String> {
    let top = (lines
        .iter()
        .flat_map(|(points, _, _)| points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15)
        .max(least_top);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..minutes, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .draw()
        .map_err(|e| e.to_string())?;
    for (points, color, name) in lines {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())
}
