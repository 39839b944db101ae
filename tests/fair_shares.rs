//! Fair shares between owners (docs/flow-control.md, "Fair shares"): within a priority,
//! two tokens with work waiting in one queue take turns, whatever each queued; a token
//! cannot buy its way ahead with a priority above its ceiling.

use baton_localcluster::testing as support;

use baton_client::{Client, CreateToken, Scope, SubmitTask};
use std::collections::HashSet;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// The fake runner never restarts: one boot id for all its requests.
const BOOT: Uuid = Uuid::from_u128(0xfa1e);

/// A client of a new token with `scopes`, through `url`.
async fn tenant(admin: &Client, url: &str, token: CreateToken) -> Client {
    Client::new(url, Some(admin.token_create(&token).await.unwrap().token)).unwrap()
}

fn submitter(name: &str) -> CreateToken {
    CreateToken {
        name: name.into(),
        scopes: vec![Scope::Submit],
        ..Default::default()
    }
}

fn tasks(label: &str, n: usize) -> Vec<SubmitTask> {
    (0..n)
        .map(|_| SubmitTask {
            labels: vec![label.into()],
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        })
        .collect()
}

/// The ids of `tasks`, in order.
fn ids(tasks: &[baton_client::Task]) -> Vec<Uuid> {
    tasks.iter().map(|t| t.id).collect()
}

/// The first `n` tasks a runner of `label` is handed, in order.
async fn first_leased(runner: &Client, n: usize) -> Vec<Uuid> {
    let mut leased = Vec::new();
    while leased.len() < n {
        let wanted = (n - leased.len()).min(20) as u32;
        let got = runner.lease(&lease_now(BOOT, wanted)).await.unwrap().tasks;
        assert!(!got.is_empty(), "work is left after {}", leased.len());
        leased.extend(got.into_iter().map(|t| t.id));
    }
    leased
}

/// Tenant A submits ten times as much as tenant B, through another node, in rounds (A's
/// 100, then B's 10). Queued first come first served, B got about one place in eleven —
/// 10 of the first 200 — and waited behind A's backlog. With fair tags the two take
/// turns while both have work waiting: every one of B's 100 tasks is among the first
/// 200 handed out, and each tenant's own tasks keep their order.
#[tokio::test(flavor = "multi_thread")]
async fn two_tenants_submitting_ten_to_one_take_turns() {
    let env = TestEnv::new("fair-ten-to-one").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let admin = user_client(&node_a.url);
    let a = tenant(&admin, &node_a.url, submitter("tenant-a")).await;
    let b = tenant(&admin, &node_b.url, submitter("tenant-b")).await;
    let mut of_a = Vec::new();
    let mut of_b = Vec::new();
    for _ in 0..10 {
        let list = a.submit_batch(tasks("fair-share", 100)).await.unwrap();
        of_a.extend(list.tasks.into_iter().map(|t| t.id));
        let list = b.submit_batch(tasks("fair-share", 10)).await.unwrap();
        of_b.extend(list.tasks.into_iter().map(|t| t.id));
    }
    let (_, runner) = register_runner(&node_b.url, &["fair-share"], 1000).await;
    let leased = first_leased(&runner, 200).await;

    let b_ids: HashSet<Uuid> = of_b.iter().copied().collect();
    let b_share = leased.iter().filter(|id| b_ids.contains(id)).count();
    println!(
        "submitted 10:1 (A {} tasks, B {}): B has {b_share} of the first {} handed out ({:.0} %)",
        of_a.len(),
        of_b.len(),
        leased.len(),
        100.0 * b_share as f64 / leased.len() as f64
    );
    assert_eq!(b_share, 100, "B's whole share is among the first 200");
    // Each tenant's own tasks in the order it submitted them.
    let a_order: Vec<Uuid> = leased
        .iter()
        .filter(|id| !b_ids.contains(id))
        .copied()
        .collect();
    assert_eq!(a_order, of_a[..a_order.len()]);
    let b_order: Vec<Uuid> = leased
        .iter()
        .filter(|id| b_ids.contains(id))
        .copied()
        .collect();
    assert_eq!(b_order, of_b);
}

/// A tenant that comes while another's backlog is being worked through is served next,
/// not after the backlog: the backlog's tags are spread ahead of the clock, the
/// newcomer's is its queued time. The fair state is kept only while it can change a tag.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_arriving_behind_a_backlog_is_served_next() {
    let env = TestEnv::new("fair-late-comer").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let a = tenant(&admin, &node.url, submitter("tenant-a")).await;
    let b = tenant(&admin, &node.url, submitter("tenant-b")).await;
    let backlog = a
        .submit_batch(tasks("late-comer", 300))
        .await
        .unwrap()
        .tasks;
    let (_, runner) = register_runner(&node.url, &["late-comer"], 1000).await;
    let first = first_leased(&runner, 100).await;
    assert_eq!(first, ids(&backlog[..100]));

    let (late, _) = b.submit(&tasks("late-comer", 1)[0]).await.unwrap();
    let next = first_leased(&runner, 1).await;
    assert_eq!(
        next,
        vec![late.id],
        "B's task goes before A's 200 still waiting"
    );
    let rest = first_leased(&runner, 200).await;
    assert_eq!(rest, ids(&backlog[100..]));

    let mut redis = env.redis().await;
    let keys = baton_coord::Keys::new(&env.redis_prefix);
    let kept_ms: i64 = redis::cmd("PTTL")
        .arg(keys.fair("q:default:late-comer"))
        .query_async(&mut redis)
        .await
        .unwrap();
    // A's next free tag is 300 spacings (s) past the burst; nothing is kept longer.
    assert!(kept_ms > 0 && kept_ms <= 302_000, "kept for {kept_ms} ms");
}

/// A task put back in its queue by its queued time — here a delayed one, released at its
/// `run_at` — never waits behind work queued after it: no fair tag is earlier than its
/// task's queued time. (With tags counted from the queue's head instead, A's backlog
/// held tags a few milliseconds apart, behind the clock, and the released task waited
/// for all of it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_delayed_task_released_into_a_backlog_waits_only_for_what_came_before_it() {
    let env = TestEnv::new("fair-released").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let a = tenant(&admin, &node.url, submitter("tenant-a")).await;
    let backlog = a.submit_batch(tasks("released", 50)).await.unwrap().tasks;
    let mut delayed = tasks("released", 1).remove(0);
    delayed.run_at = Some(chrono::Utc::now() + chrono::Duration::seconds(2));
    let (delayed, _) = a.submit(&delayed).await.unwrap();
    wait_for(
        "the delayed task to be released",
        Duration::from_secs(15),
        || async {
            let t = admin.task_get(delayed.id).await.unwrap();
            (t.status.as_str() == "queued").then_some(())
        },
    )
    .await;
    let (_, runner) = register_runner(&node.url, &["released"], 1000).await;
    let first = first_leased(&runner, 10).await;
    let place = first.iter().position(|id| *id == delayed.id);
    println!(
        "the released task was handed out {:?} of 51",
        place.map(|p| p + 1)
    );
    // Its queued time is about 2 s after the burst: behind the few of A's tagged before
    // it (one a second), ahead of the rest.
    assert!(place.is_some_and(|p| p <= 5), "{place:?} in {first:?}");
    assert!(backlog.iter().take(2).all(|t| first.contains(&t.id)));
}

/// The attack: a tenant floods priority 1000, and every other tenant's tasks wait behind
/// all of it (priority comes before fair shares). A token made with a ceiling cannot: a
/// task above it is refused (403, nothing queued), at it is taken; a ceiling out of range,
/// or on an admin token (which could make a token without one), is refused at creation.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_cannot_submit_above_its_priority_ceiling() {
    let env = TestEnv::new("fair-priority-ceiling").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let capped = tenant(
        &admin,
        &node.url,
        CreateToken {
            max_priority: Some(0),
            ..submitter("capped")
        },
    )
    .await;
    let me = capped.me().await.unwrap();
    assert_eq!(me.max_priority, Some(0));

    let mut flood = tasks("ceiling", 50);
    for t in &mut flood {
        t.priority = 1000;
    }
    let refused = capped.submit_batch(flood).await.unwrap_err();
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(403), "{refused}");
    assert!(
        refused.to_string().contains("priority 0 or lower"),
        "{refused}"
    );
    let listed = admin.task_list(&Default::default()).await.unwrap();
    assert!(listed.tasks.is_empty(), "nothing was queued: {listed:?}");

    let mut fine = tasks("ceiling", 1);
    fine[0].priority = 0;
    capped.submit_batch(fine).await.unwrap();

    for (token, field) in [
        (
            CreateToken {
                max_priority: Some(1001),
                ..submitter("too-high")
            },
            "max_priority",
        ),
        (
            CreateToken {
                scopes: vec![Scope::Admin],
                max_priority: Some(0),
                ..submitter("admin-capped")
            },
            "max_priority",
        ),
    ] {
        let e = admin.token_create(&token).await.unwrap_err();
        assert_eq!(e.status().map(|s| s.as_u16()), Some(422), "{e}");
        assert!(e.to_string().contains(field), "{e}");
    }
}
