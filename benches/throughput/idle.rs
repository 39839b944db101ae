//! The idle cost of parked runners, the nodes' own timing histograms, and a table filled
//! with finished tasks.

use super::*;

/// The nodes' own histograms, summed over the nodes: (sum, count) by series.
pub(crate) async fn node_histograms(stack: &Stack) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64)> = Vec::new();
    for node in &stack.nodes {
        let text = reqwest::get(format!("{}/metrics", node.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for (family, label, what) in [
            (
                "baton_http_request_duration_seconds",
                "/v1/runner/exchange",
                "exchange request",
            ),
            (
                "baton_postgres_query_duration_seconds",
                "op=\"statement\"",
                "group commit statement",
            ),
            (
                "baton_redis_command_duration_seconds",
                "op=\"evalsha\"",
                "Redis script",
            ),
            ("baton_group_commit_items", "", "items per group commit"),
            (
                "baton_http_request_duration_seconds",
                "route=\"/v1/tasks\"",
                "submit request",
            ),
            (
                "baton_redis_command_duration_seconds",
                "op=\"multi\"",
                "Redis transaction",
            ),
        ] {
            let find = |suffix: &str| {
                text.lines()
                    .filter(|l| l.starts_with(&format!("{family}_{suffix}")) && l.contains(label))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>()
            };
            match out.iter_mut().find(|(w, _, _)| w == what) {
                Some(entry) => {
                    entry.1 += find("sum");
                    entry.2 += find("count");
                }
                None => out.push((what.to_string(), find("sum"), find("count"))),
            }
        }
    }
    out
}

/// Where the nodes' time went between two reads of their histograms: the exchange as
/// nginx sees it, and the Postgres and Redis round trips in it.
pub(crate) fn timings(before: &[(String, f64, f64)], after: &[(String, f64, f64)]) -> String {
    let parts: Vec<String> = after
        .iter()
        .zip(before)
        .filter_map(|((what, sum, count), (_, sum0, count0))| {
            let n = count - count0;
            (n > 0.0).then(|| {
                let mean = (sum - sum0) / n;
                if what.starts_with("items") {
                    format!("{what} {mean:.1}")
                } else {
                    format!("{what} {:.2} ms", mean * 1000.0)
                }
            })
        })
        .collect();
    format!("  means: {}", parts.join("; "))
}

/// Parked runners for a while: what they cost when there is nothing to do.
pub(crate) async fn idle(
    stack: &Stack,
    scale: &Scale,
    sources: &impl Fn(&[(String, Vec<u32>)]) -> Sources,
    processes: &[(String, Vec<u32>)],
) -> String {
    let n = scale.idle_runners;
    let mut tokens = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(16) {
        let made = futures::future::join_all(
            chunk
                .iter()
                .map(|_| register_runner_token(&stack.lb.url, &[], 1)),
        )
        .await;
        tokens.extend(made.into_iter().map(|(_, t)| (t, Uuid::new_v4())));
    }
    // Steady state: runners parked for long have been heard by every node, so each
    // node's token cache knows them. One poll that does not park, on each node directly.
    for chunk in tokens.chunks(50) {
        let warmups = chunk.iter().flat_map(|(token, boot)| {
            stack.nodes.iter().map(move |node| {
                let client = Client::new(&node.url, Some(token.clone())).unwrap();
                async move { client.exchange(&poll(*boot, 0)).await }
            })
        });
        for answer in futures::future::join_all(warmups).await {
            answer.expect("a warm-up poll");
        }
    }
    let polls = Arc::new(AtomicU64::new(0));
    let pollers: Vec<_> = tokens
        .into_iter()
        .map(|(token, boot)| {
            let (url, polls) = (stack.lb.url.clone(), polls.clone());
            tokio::spawn(async move {
                let client = Client::new(&url, Some(token)).unwrap();
                loop {
                    if client.exchange(&poll(boot, 30)).await.is_ok() {
                        polls.fetch_add(1, Ordering::Relaxed);
                    } else {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            })
        })
        .collect();
    wait_for("every runner to park", Duration::from_secs(120), || async {
        (stack.parked().await >= n as u64).then_some(())
    })
    .await;
    let src = sources(processes);
    stack.settle().await;
    let before = src.snapshot().await;
    let polls_before = polls.load(Ordering::Relaxed);
    tokio::time::sleep(scale.idle_window).await;
    let after = src.snapshot().await;
    let answered = polls.load(Ordering::Relaxed) - polls_before;
    let rss: Vec<String> = stack
        .nodes
        .iter()
        .map(|node| format!("{:.0}", rss_mib(node.pid())))
        .collect();
    for p in pollers {
        p.abort();
    }
    let cost = usage(&before, &after);
    let secs = scale.idle_window.as_secs_f64();
    println!(
        "idle statements over {secs:.0} s:\n{}",
        cost.top_statements(1, 10)
    );
    let line = format!(
        "idle, {n} parked runners (wait_s 30) for {secs:.0} s: {:.2} Postgres statements/s \
         ({:.2} commits/s) in all   [target <= 1]; {:.2} Redis commands per poll ({answered} polls)   \
         [target <= 2]; resident memory per node {} MiB   [target <= 150]",
        cost.statements as f64 / secs,
        cost.commits as f64 / secs,
        cost.redis_commands as f64 / answered.max(1) as f64,
        rss.join(", ")
    );
    println!("{line}");
    line
}

/// `rows` tasks finished a day ago, older than everything else, as a busy cluster's table
/// holds them for the retention; vacuumed and analysed, as autovacuum would leave it.
pub(crate) async fn fill_finished(stack: &Stack, rows: i64) {
    let started = Instant::now();
    let mut db = stack.env.db().await;
    sqlx::query(
        "INSERT INTO tasks (id, queue, labels, command, env, secret_env, priority, timeout_s,
                            queue_timeout_s, max_attempts, status, attempt, created_by,
                            created_at, updated_at, queued_at, leased_at, started_at,
                            finished_at, exit_code, runner_id, lease_id)
         SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
                'history', '{}', '{true}', '{}', '{}', 0, 3600, 86400, 1, 'succeeded', 1,
                'bench', at, at, at, at, at, at, 0, gen_random_uuid(), gen_random_uuid()
         FROM (SELECT g, md5(g::text) AS h,
                      (extract(epoch FROM now() - interval '1 day') * 1000)::bigint + g AS ms,
                      now() - interval '1 day' + g * interval '1 millisecond' AS at
               FROM generate_series(1, $1) AS g) AS s",
    )
    .bind(rows)
    .execute(&mut db)
    .await
    .unwrap();
    sqlx::query("VACUUM ANALYZE tasks")
        .execute(&mut db)
        .await
        .unwrap();
    println!(
        "{rows} finished tasks written and vacuumed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
