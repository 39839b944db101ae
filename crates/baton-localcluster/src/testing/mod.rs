//! The test harness: a fresh Postgres database and Redis key prefix per test, and real
//! `baton` processes (nodes, runners) spawned from the binary under test.
//!
//! Servers come from `BATON_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and `BATON_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`); `scripts/test.sh` starts them when none is reachable.
//! Tests and benches name it `support` (`use baton_localcluster::testing as support;`).

pub mod nginx;
pub mod otlp;
pub mod procs;
pub mod protocol;
pub mod services;
pub mod tls;

use crate::timings::NodeTimings;
use baton_client::Client;
use sqlx::{Connection, PgConnection};
use std::future::Future;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;
use uuid::Uuid;

pub use procs::{NodeProc, RunnerProc};
pub use protocol::*;

/// The admin token every test node takes (`BATON_API_TOKEN`).
pub const API_TOKEN: &str = "test-admin-token";

/// The tests' node thresholds as `baton serve` flags ([`NodeTimings::FAST_HA`]): failovers
/// in seconds.
pub static FAST_HA: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    NodeTimings::FAST_HA
        .args()
        .into_iter()
        .map(|arg| &*arg.leak())
        .collect()
});
/// The token test runners register with (`BATON_REGISTRATION_TOKEN`).
pub const REGISTRATION_TOKEN: &str = "test-registration-token";
/// The key the test nodes seal `secret_env` with (base64 of 32 bytes).
pub const SECRETS_KEY: &str = "dGVzdC1zZWNyZXRzLWtleS0wMTIzNDU2Nzg5YWJjZGU=";

/// The shared test Postgres, as a superuser who may create and drop databases.
pub fn admin_database_url() -> String {
    std::env::var("BATON_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The shared test Redis; tests keep apart by key prefix.
pub fn redis_url() -> String {
    std::env::var("BATON_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// One test's world: its own database, its own Redis prefix, its own log folder.
pub struct TestEnv {
    /// The test's name, the start of its folder's.
    pub name: String,
    /// Its database, `baton_t_<tag>`, dropped with it.
    pub database: String,
    /// Its database's URL: what its nodes are given.
    pub database_url: String,
    /// The server's admin URL, which created the database and will drop it.
    pub admin_url: String,
    /// The Redis its nodes use.
    pub redis_url: String,
    /// `{bt-<tag>}:`, one hash tag, so a Redis Cluster keeps all its keys on one node;
    /// its keys are deleted with it.
    pub redis_prefix: String,
    /// Its folder under `target/tmp/baton-tests`: logs, runners' state, kept for a
    /// post-mortem.
    pub dir: PathBuf,
}

impl TestEnv {
    /// A test world on the shared servers.
    pub async fn new(name: &str) -> TestEnv {
        Self::with_servers(name, &admin_database_url(), &redis_url()).await
    }

    /// A test world on given servers (private ones the test may kill).
    pub async fn with_servers(name: &str, admin: &str, redis_url: &str) -> TestEnv {
        baton_client::install_tls_provider();
        let tag = Uuid::new_v4().simple().to_string()[..12].to_string();
        let database = format!("baton_t_{tag}");
        let admin = admin.to_string();
        let mut conn = PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("test Postgres at {admin} is not reachable: {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
            .execute(&mut conn)
            .await
            .expect("create test database");
        let mut url = reqwest::Url::parse(&admin).expect("BATON_TEST_DATABASE_URL is a URL");
        url.set_path(&database);
        let database_url = url.to_string();
        let dir = procs::target_tmp_dir()
            .join("baton-tests")
            .join(format!("{name}-{tag}"));
        std::fs::create_dir_all(&dir).expect("test dir");
        TestEnv {
            name: name.to_string(),
            database,
            database_url,
            admin_url: admin,
            redis_url: redis_url.to_string(),
            redis_prefix: format!("{{bt-{tag}}}:"),
            dir,
        }
    }

    /// A ready node with the default settings.
    pub async fn node(&self) -> NodeProc {
        NodeProc::start(self, &[]).await
    }

    /// A ready node with more `baton serve` flags.
    pub async fn node_with(&self, extra_args: &[&str]) -> NodeProc {
        NodeProc::start(self, extra_args).await
    }

    /// A node with more flags and environment (a blank value unsets a default).
    pub async fn node_with_env(&self, extra_args: &[&str], vars: &[(String, String)]) -> NodeProc {
        NodeProc::start_with_env(self, extra_args, vars).await
    }

    /// A `baton runner` agent process talking to `server`.
    pub async fn runner(&self, server: &str, labels: &[&str], capacity: u32) -> RunnerProc {
        RunnerProc::start(self, server, labels, capacity, &[], None, &[]).await
    }

    /// A runner agent with more `baton runner` flags.
    pub async fn runner_with(
        &self,
        server: &str,
        labels: &[&str],
        capacity: u32,
        extra_args: &[&str],
    ) -> RunnerProc {
        RunnerProc::start(self, server, labels, capacity, extra_args, None, &[]).await
    }

    /// A connection to the test's database, to look at rows directly.
    pub async fn db(&self) -> PgConnection {
        PgConnection::connect(&self.database_url)
            .await
            .expect("connect to the test database")
    }

    /// A connection to the test's Redis (its keys are under `redis_prefix`).
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the test redis")
    }

    /// How many task rows the database holds: the truth, whatever the API says.
    pub async fn count_tasks(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM tasks")
            .fetch_one(&mut self.db().await)
            .await
            .unwrap()
    }

    /// Waits until the task is terminal and returns it.
    pub async fn wait_terminal(&self, client: &Client, id: Uuid) -> baton_client::Task {
        wait_for("the task to finish", Duration::from_secs(60), || async {
            client
                .task_get(id)
                .await
                .ok()
                .filter(|t| t.status.is_terminal())
        })
        .await
    }
}

/// A file tasks append to (a record of their runs): made world-writable first, since a
/// runner agent started as root runs its tasks as users of their own.
pub fn file_tasks_may_write(path: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, b"").expect("the record file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).expect("its mode");
    path.to_path_buf()
}

/// A fresh folder tasks may write in and the test can see: not under /tmp, which each
/// task of a root runner has a private one of, and open to every user, as tasks run as
/// users of their own.
pub fn dir_tasks_may_write(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = procs::target_tmp_dir().join(format!("{name}-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("the folder");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("its mode");
    dir
}

/// The whole stored log of a task.
pub async fn read_log(client: &Client, id: Uuid) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let slice = client.task_logs(id, out.len() as i64).await.unwrap();
        if slice.bytes.is_empty() {
            return out;
        }
        out.extend_from_slice(&slice.bytes);
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let admin = self.admin_url.clone();
        let database = self.database.clone();
        let (redis_url, prefix) = (self.redis_url.clone(), self.redis_prefix.clone());
        // Drop runs outside any runtime we may block, so the cleanup gets its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut conn) = PgConnection::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
                if let Ok(client) = redis::Client::open(redis_url.as_str())
                    && let Ok(mut redis) = client.get_multiplexed_async_connection().await
                {
                    // The braces of the hash tag are literal in a glob.
                    let keys: Vec<String> = redis::cmd("KEYS")
                        .arg(format!("{prefix}*"))
                        .query_async(&mut redis)
                        .await
                        .unwrap_or_default();
                    if !keys.is_empty() {
                        let _: Result<(), _> =
                            redis::cmd("DEL").arg(keys).query_async(&mut redis).await;
                    }
                }
            })
        })
        .join();
    }
}

/// A task submitted on `submit_to` runs on a runner of `runner_on`, to success, and
/// its output is stored.
pub async fn a_task_runs(env: &TestEnv, runner_on: &procs::NodeProc, submit_to: &procs::NodeProc) {
    let _runner = env.runner(&runner_on.url, &[], 1).await;
    let user = user_client(&submit_to.url);
    let (task, _) = user
        .submit(&baton_client::SubmitTask {
            script: Some("echo ran".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(
        done.status,
        baton_core::TaskStatus::Succeeded,
        "task {}",
        task.id
    );
    assert_eq!(read_log(&user, task.id).await, b"ran\n");
}

/// Submits `true` for runners with `label` and waits until it succeeded.
pub async fn run_true(env: &TestEnv, client: &Client, label: &str) -> baton_client::Task {
    let (task, _) = client
        .submit(&baton_client::SubmitTask {
            labels: vec![label.into()],
            command: Some(vec!["true".into()]),
            ..baton_client::SubmitTask::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(client, task.id).await;
    assert_eq!(done.status.as_str(), "succeeded", "task {}", task.id);
    done
}

/// Polls `check` until it yields `Some`, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_until(timeout, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// The one deadline poll of the cluster and its tests.
pub use crate::readiness::poll_until;

/// A task row to insert through the store directly: `true`, in the default queue, with
/// every option at its default; tests change what they are about.
pub fn new_task_row() -> baton_store::NewTask {
    baton_store::NewTask {
        id: Uuid::now_v7(),
        queue: "default".into(),
        labels: vec![],
        command: Some(vec!["true".into()]),
        script: None,
        env: Default::default(),
        secret_env: Default::default(),
        payload: None,
        priority: 0,
        timeout_s: 60,
        queue_timeout_s: 60,
        max_attempts: 1,
        run_at: None,
        idempotency_key: None,
        notify_url: None,
        created_by: "test".into(),
        traceparent: None,
        concurrency_key: None,
        concurrency_limit: None,
        schedule_id: None,
        scheduled_for: None,
        retry_of: None,
        retry_policy: None,
        ..Default::default()
    }
}

/// A runner row that may take any task (every queue, no labels needed beyond none), for
/// store tests that start tasks directly: a start is refused for a runner Postgres does
/// not know.
pub async fn registered_runner(store: &baton_store::Store) -> baton_core::RunnerId {
    let id = baton_core::RunnerId::random();
    store
        .runner_insert(
            &baton_store::NewRunner {
                id,
                name: format!("store-test-{id}"),
                labels: Vec::new(),
                queues: Vec::new(),
                capacity: 1,
                token_hash: id.uuid().as_bytes().to_vec(),
                version: "test".into(),
                registration_token_id: None,
                provisioner: None,
            },
            chrono::Utc::now(),
        )
        .await
        .expect("insert a runner");
    id
}
