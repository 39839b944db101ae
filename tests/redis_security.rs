//! Redis over TLS, as ACL users: a single server, a master found through a sentinel that
//! has a user of its own, and a Cluster, each taking TLS connections only (`--port 0`)
//! from named users only (`default` is off). A node reaches each with its settings and
//! runs a task through it; a node with a wrong password, or that does not trust the
//! server's CA, is refused — it stays not ready and says why in its log — and no password
//! is ever written to a log.

use baton_localcluster::testing as support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::services::free_port;
use support::tls::{ServerCert, TestCa};
use support::*;

const USER: &str = "baton";
/// Distinct strings, so a log holding one is found.
const PASSWORD: &str = "pw-4f9c-for-baton";
const SENTINEL_USER: &str = "watcher";
const SENTINEL_PASSWORD: &str = "pw-81d2-for-the-sentinel";
/// The sentinel's own user on the master, for its monitoring.
const MONITOR_USER: &str = "monitor";
const MONITOR_PASSWORD: &str = "pw-0b7e-for-monitoring";

/// Redis processes, killed when the test ends however it ends, and the TLS they speak.
struct Servers {
    children: Vec<Child>,
    dir: PathBuf,
    /// The test's CA, which nodes are told to trust.
    ca: TestCa,
    /// The certificate, signed by `ca`, every server presents.
    cert: ServerCert,
}

impl Servers {
    fn new(name: &str) -> Servers {
        let dir =
            std::env::temp_dir().join(format!("baton-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = TestCa::new(&dir, "ca");
        let cert = ca.server_cert("redis");
        Servers {
            children: Vec::new(),
            dir,
            ca,
            cert,
        }
    }

    /// `redis-server ARGS`, its output kept in the test's folder.
    fn spawn(&mut self, name: &str, args: &[String]) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new("redis-server")
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("redis-server");
        self.children.push(child);
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `--flag value` pairs, as redis-server takes its settings.
fn settings(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
        .collect()
}

/// A server taking TLS on `port` only, presenting the certificate of `servers`, clients
/// not asked for one; its data in `dir`.
fn tls_only(servers: &Servers, port: u16, dir: &Path) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    settings(&[
        ("--port", "0"),
        ("--tls-port", &port.to_string()),
        ("--bind", "127.0.0.1"),
        ("--tls-cert-file", &path(&servers.cert.cert)),
        ("--tls-key-file", &path(&servers.cert.key)),
        ("--tls-ca-cert-file", &path(&servers.ca.cert)),
        ("--tls-auth-clients", "no"),
        ("--save", ""),
        ("--appendonly", "no"),
        ("--dir", &path(dir)),
    ])
}

/// ACL: `default` off, each of `users` with every right.
fn only_users(users: &[(&str, &str)]) -> Vec<String> {
    let mut out = args(&["--user", "default", "off"]);
    for (name, password) in users {
        out.push("--user".into());
        out.extend(
            format!("{name} on >{password} ~* &* +@all")
                .split(' ')
                .map(String::from),
        );
    }
    out
}

/// A connection the test makes itself, over TLS with the test CA.
async fn connect(url: &str, ca: &TestCa) -> Option<redis::aio::MultiplexedConnection> {
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.pem()),
    };
    let client = redis::Client::build_with_tls(url, certificates).ok()?;
    client.get_multiplexed_async_connection().await.ok()
}

async fn wait_answers(what: &str, url: &str, ca: &TestCa) {
    wait_for(what, Duration::from_secs(10), || async {
        let mut conn = connect(url, ca).await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    })
    .await;
}

fn owned(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Redis that speaks TLS only, with the test's user alone: its port, and its URL with
/// that user's credentials.
async fn tls_server_of_one_user(servers: &mut Servers) -> (u16, String) {
    let port = free_port();
    let mut server = tls_only(servers, port, &servers.dir);
    server.extend(only_users(&[(USER, PASSWORD)]));
    servers.spawn("redis", &server);
    let url = format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}");
    wait_answers("the TLS redis to answer", &url, &servers.ca).await;
    (port, url)
}

/// No password of the test's in any log of the nodes.
fn no_password_in(nodes: &[&NodeProc]) {
    for node in nodes {
        let log = std::fs::read_to_string(&node.log).unwrap();
        for secret in [PASSWORD, SENTINEL_PASSWORD, MONITOR_PASSWORD] {
            assert!(
                !log.contains(secret),
                "{} shows a password",
                node.log.display()
            );
        }
    }
}

/// The node stays not ready and its log says `why`.
async fn refused(node: &NodeProc, why: &str) {
    let http = reqwest::Client::new();
    let url = format!("{}/readyz", node.url);
    wait_for(
        &format!("{} to be refused with {why:?}", node.node_id),
        Duration::from_secs(20),
        || async {
            let answer = http.get(&url).send().await.ok()?;
            let body = answer.text().await.ok()?;
            let log = std::fs::read_to_string(&node.log).ok()?;
            (body.contains("redis unavailable") && log.contains(why)).then_some(())
        },
    )
    .await;
    let answer = http.get(&url).send().await.unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_reaches_one_server_over_tls_as_an_acl_user() {
    let mut servers = Servers::new("redis-tls");
    let (port, url) = tls_server_of_one_user(&mut servers).await;

    let env = TestEnv::with_servers("redis-tls", &admin_database_url(), &url).await;
    let ca_file = servers.ca.cert.display().to_string();
    // The user in the URL...
    let in_url = env.node_with(&["--redis-ca-file", &ca_file]).await;
    // ...or in settings of their own, the password from the environment.
    let tls_url = format!("rediss://127.0.0.1:{port}");
    let in_settings = NodeProc::start_with_env(
        &env,
        &["--redis-url", &tls_url, "--redis-ca-file", &ca_file],
        &owned(&[
            ("BATON_REDIS_USERNAME", USER),
            ("BATON_REDIS_PASSWORD", PASSWORD),
        ]),
    )
    .await;
    a_task_runs(&env, &in_url, &in_settings).await;
    no_password_in(&[&in_url, &in_settings]);

    // What goes over the wire is TLS: the server has no plain port to take anything else.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    assert!(plain.get_multiplexed_async_connection().await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_refuses_a_server_it_cannot_trust_or_log_in_to() {
    let mut servers = Servers::new("redis-refused");
    let stranger = TestCa::new(&servers.dir, "stranger");
    let (port, url) = tls_server_of_one_user(&mut servers).await;
    let env = TestEnv::with_servers("redis-refused", &admin_database_url(), &url).await;

    let wrong_password = format!("rediss://{USER}:not-{PASSWORD}@127.0.0.1:{port}");
    let ca_file = servers.ca.cert.display().to_string();
    let node = NodeProc::start_unready(
        &env,
        &["--redis-url", &wrong_password, "--redis-ca-file", &ca_file],
        &[],
    )
    .await;
    refused(&node, "AuthenticationFailed").await;

    // The system's roots do not include the test CA...
    let no_ca = NodeProc::start_unready(&env, &[], &[]).await;
    refused(&no_ca, "UnknownIssuer").await;
    // ...nor does a CA that did not sign the server's certificate.
    let stranger_file = stranger.cert.display().to_string();
    let wrong_ca = NodeProc::start_unready(&env, &["--redis-ca-file", &stranger_file], &[]).await;
    refused(&wrong_ca, "UnknownIssuer").await;
    no_password_in(&[&node, &no_ca, &wrong_ca]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_finds_the_master_through_a_sentinel_each_with_its_own_user() {
    let mut servers = Servers::new("redis-sentinel-tls");
    let (master, sentinel) = (free_port(), free_port());
    let mut server = tls_only(&servers, master, &servers.dir);
    server.extend(only_users(&[
        (USER, PASSWORD),
        (MONITOR_USER, MONITOR_PASSWORD),
    ]));
    servers.spawn("master", &server);
    // The sentinel speaks TLS too, to its clients and to the master (`tls-replication`),
    // and takes its own user only.
    let conf = servers.dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {sentinel}\nbind 127.0.0.1\ndir {dir}\n\
             tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
             tls-auth-clients no\ntls-replication yes\n\
             user default off\nuser {SENTINEL_USER} on >{SENTINEL_PASSWORD} ~* &* +@all\n\
             sentinel monitor mymaster 127.0.0.1 {master} 1\n\
             sentinel auth-user mymaster {MONITOR_USER}\n\
             sentinel auth-pass mymaster {MONITOR_PASSWORD}\n\
             sentinel down-after-milliseconds mymaster 5000\n",
            dir = servers.dir.display(),
            cert = servers.cert.cert.display(),
            key = servers.cert.key.display(),
            ca = servers.ca.cert.display(),
        ),
    )
    .unwrap();
    servers.spawn(
        "sentinel",
        &[conf.display().to_string(), "--sentinel".into()],
    );
    let master_url = format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{master}");
    let sentinel_url = format!("rediss://{SENTINEL_USER}:{SENTINEL_PASSWORD}@127.0.0.1:{sentinel}");
    wait_answers("the master to answer", &master_url, &servers.ca).await;
    wait_answers("the sentinel to answer", &sentinel_url, &servers.ca).await;

    let env = TestEnv::with_servers("redis-sentinel-tls", &admin_database_url(), &master_url).await;
    let (ca_file, address) = (
        servers.ca.cert.display().to_string(),
        format!("127.0.0.1:{sentinel}"),
    );
    // Every user and password in a setting of its own...
    let in_settings = NodeProc::start_with_env(
        &env,
        &[
            "--redis-sentinel",
            &address,
            "--redis-sentinel-master",
            "mymaster",
            "--redis-tls",
            "--redis-ca-file",
            &ca_file,
        ],
        &owned(&[
            ("BATON_REDIS_SENTINEL_USERNAME", SENTINEL_USER),
            ("BATON_REDIS_SENTINEL_PASSWORD", SENTINEL_PASSWORD),
            ("BATON_REDIS_USERNAME", USER),
            ("BATON_REDIS_PASSWORD", PASSWORD),
        ]),
    )
    .await;
    // ...or the sentinel's in its URL, whose `rediss://` asks for TLS everywhere.
    let sentinel_in_url: [&str; 6] = [
        "--redis-sentinel",
        &sentinel_url,
        "--redis-sentinel-master",
        "mymaster",
        "--redis-ca-file",
        &ca_file,
    ];
    let in_url = NodeProc::start_with_env(
        &env,
        &sentinel_in_url,
        &owned(&[
            ("BATON_REDIS_USERNAME", USER),
            ("BATON_REDIS_PASSWORD", PASSWORD),
        ]),
    )
    .await;
    a_task_runs(&env, &in_settings, &in_url).await;

    // The sentinel's user is not the master's: without the master's own, no master.
    let sentinel_only = NodeProc::start_unready(&env, &sentinel_in_url, &[]).await;
    refused(&sentinel_only, "NOAUTH").await;
    no_password_in(&[&in_settings, &in_url, &sentinel_only]);
}

/// Three masters over TLS (the cluster bus too), no replicas: enough for Baton's one slot.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_reaches_a_cluster_over_tls_as_an_acl_user() {
    let mut servers = Servers::new("redis-cluster-tls");
    let mut ports = Vec::new();
    while ports.len() < 3 {
        // A cluster node also listens on its port + 10000 (the cluster bus).
        let port = free_port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            ports.push(port);
        }
    }
    for &port in &ports {
        let dir = servers.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = tls_only(&servers, port, &dir);
        // The cluster bus and replication over TLS too.
        server.extend(settings(&[
            ("--cluster-enabled", "yes"),
            ("--cluster-config-file", "nodes.conf"),
            ("--cluster-node-timeout", "1000"),
            ("--tls-cluster", "yes"),
            ("--tls-replication", "yes"),
        ]));
        server.extend(only_users(&[(USER, PASSWORD)]));
        servers.spawn(&format!("node-{port}"), &server);
        let url = format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}");
        wait_answers("a cluster node to answer", &url, &servers.ca).await;
    }
    let create = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(&servers.ca.cert)
        .args(["--user", USER, "--pass", PASSWORD, "--no-auth-warning"])
        .args(["--cluster", "create"])
        .args(ports.iter().map(|p| format!("127.0.0.1:{p}")))
        .arg("--cluster-yes")
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli --cluster create");
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stdout)
    );
    for &port in &ports {
        let url = format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}");
        wait_for(
            "the cluster to be whole",
            Duration::from_secs(20),
            || async {
                let mut conn = connect(&url, &servers.ca).await?;
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                info.contains("cluster_state:ok").then_some(())
            },
        )
        .await;
    }

    let first = format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{}", ports[0]);
    let env = TestEnv::with_servers("redis-cluster-tls", &admin_database_url(), &first).await;
    let cluster_url = format!(
        "rediss+cluster://{USER}:{PASSWORD}@127.0.0.1:{},127.0.0.1:{}",
        ports[0], ports[1]
    );
    let ca_file = servers.ca.cert.display().to_string();
    let node = env
        .node_with(&["--redis-url", &cluster_url, "--redis-ca-file", &ca_file])
        .await;
    a_task_runs(&env, &node, &node).await;
    no_password_in(&[&node]);
}
