//! Completion webhooks as an attacker and as a receiver see them: a `notify_url` that
//! points inside the network is refused (at submit when it is an address, at delivery
//! when a name resolves there), a redirect is not followed, the URL's password never
//! shows, a delivery that keeps failing is given up and the task says so, and every
//! delivery carries a Standard Webhooks signature a receiver can check with the secret
//! only an admin can read.

use baton_localcluster::testing as support;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use baton_client::{Client, NotifyDelivery, SubmitTask, Task};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

/// One request as a receiver got it.
#[derive(Debug, Clone)]
struct Delivery {
    headers: HeaderMap,
    body: Bytes,
}

/// A receiver on loopback that records what reaches `/hook` or `/services/...` and answers
/// `status`; `/go` redirects to `/hook`.
struct Receiver {
    base: String,
    got: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    async fn start(status: StatusCode) -> Receiver {
        let got: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let record = {
            let got = got.clone();
            move |headers: HeaderMap, body: Bytes| {
                let got = got.clone();
                async move {
                    got.lock().unwrap().push(Delivery { headers, body });
                    status
                }
            }
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(record.clone()))
            // A Slack-style address: the path is the credential.
            .route("/services/{*rest}", axum::routing::post(record))
            .route(
                "/go",
                axum::routing::post(|| async {
                    (StatusCode::TEMPORARY_REDIRECT, [("location", "/hook")])
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base, got }
    }

    fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.got.lock().unwrap().clone()
    }
}

fn hooked(label: &str, notify_url: &str) -> SubmitTask {
    SubmitTask {
        labels: vec![label.into()],
        command: Some(vec!["true".into()]),
        notify_url: Some(notify_url.into()),
        ..SubmitTask::default()
    }
}

/// Waits until the task's webhook is no longer pending, and returns the task.
async fn settled(user: &Client, id: uuid::Uuid) -> Task {
    wait_for("the webhook to settle", Duration::from_secs(30), || async {
        let task = user.task_get(id).await.ok()?;
        let state = task.notify_state.as_ref()?.state;
        (state != NotifyDelivery::Pending).then_some(task)
    })
    .await
}

/// A node with the default address policy (nothing internal allowed), giving a webhook
/// up after two attempts.
async fn guarded_node(env: &TestEnv) -> NodeProc {
    let mut args = FAST_HA.to_vec();
    args.extend(["--webhook-max-attempts", "2"]);
    NodeProc::start_with_env(env, &args, &[("BATON_WEBHOOK_ALLOW".into(), String::new())]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_notify_url_inside_the_network_is_refused_at_submit() {
    let env = TestEnv::new("hook-ssrf-submit").await;
    let node = guarded_node(&env).await;
    let user = user_client(&node.url);
    let receiver = Receiver::start(StatusCode::OK).await;
    let port = receiver.port();
    let before = env.count_tasks().await;
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        // Other spellings of loopback that URL parsers turn into it.
        format!("http://127.1:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        // Cloud metadata, the private network, the unspecified address.
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://0.0.0.0/".to_string(),
    ] {
        let err = user
            .submit(&hooked("hooks", &url))
            .await
            .expect_err(&format!("{url} was accepted"));
        assert_eq!(err.status().map(|s| s.as_u16()), Some(422), "{url}: {err}");
        assert!(
            err.to_string().contains("webhooks may not reach"),
            "{url}: {err}"
        );
    }
    assert_eq!(
        env.count_tasks().await,
        before,
        "a refused submit wrote nothing"
    );
    assert!(receiver.deliveries().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_resolves_inside_the_network_is_refused_at_delivery() {
    let env = TestEnv::new("hook-ssrf-name").await;
    let node = guarded_node(&env).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["hooks"], 1).await;
    let receiver = Receiver::start(StatusCode::OK).await;
    // A name is accepted at submit (what it resolves to may change), then checked on
    // every address it resolves to at delivery: `localhost` is loopback.
    let url = format!("http://localhost:{}/hook", receiver.port());
    let (task, _) = user.submit(&hooked("hooks", &url)).await.unwrap();
    let done = settled(&user, task.id).await;
    assert_eq!(done.status.as_str(), "succeeded");
    let hook = done.notify_state.unwrap();
    assert_eq!(hook.state, NotifyDelivery::Failed, "{hook:?}");
    assert_eq!(hook.attempts, 2, "given up after webhook_max_attempts");
    let error = hook.last_error.unwrap_or_default();
    assert!(error.contains("given up"), "{error}");
    assert!(
        receiver.deliveries().is_empty(),
        "a refused address was reached"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_signed_with_the_admins_secret_and_redirects_are_not_followed() {
    let env = TestEnv::new("hook-signed").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["hooks"], 2).await;
    let receiver = Receiver::start(StatusCode::OK).await;

    // The secret is an admin's: a submit token is refused it.
    let http = reqwest::Client::new();
    let secret_url = format!("{}/v1/webhooks/secret", node.url);
    let submitter = user
        .token_create(&baton_client::CreateToken {
            name: "hooks-submitter".into(),
            scopes: vec![baton_client::Scope::Submit],
            ..Default::default()
        })
        .await
        .unwrap();
    let refused = http
        .get(&secret_url)
        .bearer_auth(&submitter.token)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let secret: serde_json::Value = http
        .get(&secret_url)
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let secret = secret["secret"].as_str().unwrap().to_string();
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_ form"))
        .unwrap();

    // The password in the URL is never shown back.
    let with_password = receiver.base.replace("http://", "http://hook:s3cr3t@") + "/hook";
    let (signed, _) = user.submit(&hooked("hooks", &with_password)).await.unwrap();
    assert!(
        !signed.notify_url.clone().unwrap().contains("s3cr3t"),
        "{:?}",
        signed.notify_url
    );
    let redirected = format!("{}/go", receiver.base);
    let (moved, _) = user.submit(&hooked("hooks", &redirected)).await.unwrap();

    let delivery = wait_for("the signed delivery", Duration::from_secs(30), || async {
        receiver.deliveries().into_iter().next()
    })
    .await;
    let header = |name: &str| delivery.headers[name].to_str().unwrap().to_string();
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp"));
    assert_eq!(id, format!("{}:succeeded", signed.id));
    assert_eq!(header("idempotency-key"), id);
    let age = chrono::Utc::now().timestamp() - timestamp.parse::<i64>().unwrap();
    assert!(age.abs() < 60, "timestamp {timestamp} is now");
    // As a receiver checks it: HMAC-SHA256 over "id.timestamp.body", base64, "v1,".
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&delivery.body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    assert!(
        header("webhook-signature")
            .split(' ')
            .any(|s| s == expected),
        "signature {} is not {expected}",
        header("webhook-signature")
    );
    let body: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["task"]["id"], signed.id.to_string());
    assert!(
        !String::from_utf8_lossy(&delivery.body).contains("s3cr3t"),
        "the body repeats the password"
    );

    // The redirect answer is a failure, retried; `/hook` never hears of that task.
    let failing = wait_for("the redirect to fail", Duration::from_secs(30), || async {
        let task = user.task_get(moved.id).await.ok()?;
        let hook = task.notify_state?;
        hook.last_error.filter(|_| hook.attempts >= 2)
    })
    .await;
    assert!(failing.contains("307"), "{failing}");
    let for_moved = receiver
        .deliveries()
        .iter()
        .filter(|d| {
            d.headers["webhook-id"]
                .to_str()
                .unwrap()
                .starts_with(&moved.id.to_string())
        })
        .count();
    assert_eq!(for_moved, 0, "the redirect was followed");
    let delivered = settled(&user, signed.id).await.notify_state.unwrap();
    assert_eq!(delivered.state, NotifyDelivery::Delivered);
}

/// The attack from the security review: a webhook address carries its credential as the
/// user part, in the path (Slack's form) or in the query. Before, only a password was
/// hidden: the rest was shown to every reader of the task or its schedule and repeated in
/// the webhook body. Now none of them is shown anywhere; the delivery still goes to the
/// whole address.
#[tokio::test(flavor = "multi_thread")]
async fn no_part_of_a_webhook_address_that_may_hold_a_credential_is_shown() {
    let env = TestEnv::new("hook-redacted").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["redact"], 1).await;
    let receiver = Receiver::start(StatusCode::OK).await;
    let credentials = ["us3rt0ken", "pathsecr3t", "querysecr3t"];
    let url = receiver.base.replace("http://", "http://us3rt0ken@")
        + "/services/T0/B0/pathsecr3t?token=querysecr3t";
    let (task, _) = user.submit(&hooked("redact", &url)).await.unwrap();
    let schedule = user
        .schedule_create(&baton_client::CreateSchedule {
            name: "redacted-hook".into(),
            cron: "0 0 1 1 *".into(),
            task: hooked("redact", &url),
            ..Default::default()
        })
        .await
        .unwrap();
    let delivery = wait_for("the delivery", Duration::from_secs(30), || async {
        receiver.deliveries().into_iter().next()
    })
    .await;
    let listed = user.task_list(&Default::default()).await.unwrap();
    let shown = [
        serde_json::to_string(&task).unwrap(),
        serde_json::to_string(&user.task_get(task.id).await.unwrap()).unwrap(),
        serde_json::to_string(&listed).unwrap(),
        serde_json::to_string(&schedule).unwrap(),
        serde_json::to_string(&user.schedule_get(schedule.id).await.unwrap()).unwrap(),
        String::from_utf8_lossy(&delivery.body).into_owned(),
    ];
    for text in &shown {
        for credential in credentials {
            assert!(!text.contains(credential), "{credential} shown in {text}");
        }
    }
    let host = receiver.base.trim_start_matches("http://");
    assert!(
        shown[1].contains(&format!("http://***@{host}/***?***")),
        "{}",
        shown[1]
    );
}
