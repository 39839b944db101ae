//! The cluster the benchmark measures: a private Postgres (durable: `fsync` and
//! synchronous commit on, as in production, with `pg_stat_statements`), a private Redis,
//! three `baton serve` nodes and nginx in front of them with the production
//! configuration — plus two ports pinned to one node each, for the pickup figure.

use baton_localcluster::testing::nginx::{NginxProc, conf};
use baton_localcluster::testing::services::{PostgresProc, RedisProc, free_port};
use baton_localcluster::testing::{NodeProc, TestEnv};
use sqlx::Connection;
use std::time::Duration;

pub struct Stack {
    pub env: TestEnv,
    pub pg: PostgresProc,
    pub redis: RedisProc,
    pub nodes: Vec<NodeProc>,
    pub lb: NginxProc,
    /// nginx ports that reach only node 0 and only node 1.
    pub pinned: [String; 2],
}

impl Stack {
    pub async fn start() -> Stack {
        Stack::start_with(&[]).await
    }

    /// The stack with more `baton serve` flags on each node.
    pub async fn start_with(node_args: &[&str]) -> Stack {
        let pg = PostgresProc::start_durable(&[
            "shared_preload_libraries=pg_stat_statements",
            "pg_stat_statements.track_planning=on",
            "max_connections=300",
        ])
        .await;
        let dir = std::env::temp_dir().join(format!(
            "baton-bench-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let redis = RedisProc::start(&dir).await;
        let env = TestEnv::with_servers("bench-throughput", &pg.admin_url(), &redis.url()).await;
        // In the admin database, where the counters are read from (the views are
        // cluster-wide).
        let mut admin = sqlx::PgConnection::connect(&pg.admin_url()).await.unwrap();
        sqlx::query("CREATE EXTENSION pg_stat_statements")
            .execute(&mut admin)
            .await
            .unwrap();
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(env.node_with(node_args).await);
        }
        let ports: Vec<u16> = nodes.iter().map(|n| port_of(&n.url)).collect();
        let pinned_ports = [free_port(), free_port()];
        let mut site = conf::site(conf::PRODUCTION, "{listen}", &ports);
        for (pin, node) in pinned_ports.iter().zip(&ports) {
            site.push_str(&format!(
                "upstream pin_{node} {{ server 127.0.0.1:{node}; keepalive 16; }}\n\
                 server {{\n    listen 127.0.0.1:{pin};\n    proxy_http_version 1.1;\n    \
                 proxy_set_header Connection \"\";\n    proxy_read_timeout 90s;\n    \
                 proxy_buffering off;\n    location / {{ proxy_pass http://pin_{node}; }}\n}}\n"
            ));
        }
        let lb = NginxProc::start(&env.dir, &site).await;
        let pinned = pinned_ports.map(|p| format!("http://127.0.0.1:{p}"));
        Stack {
            env,
            pg,
            redis,
            nodes,
            lb,
            pinned,
        }
    }

    /// How many lease requests are parked on the nodes now.
    pub async fn parked(&self) -> u64 {
        let http = reqwest::Client::new();
        let mut total = 0;
        for node in &self.nodes {
            let body: serde_json::Value =
                match http.get(format!("{}/readyz", node.url)).send().await {
                    Ok(resp) => resp.json().await.unwrap_or_default(),
                    Err(_) => continue,
                };
            total += body["parked_leases"].as_u64().unwrap_or(0);
        }
        total
    }

    /// Waits until the nodes have written what they were asked and the statistics of
    /// Postgres's backends have landed (an idle backend reports within 10 s).
    pub async fn settle(&self) {
        tokio::time::sleep(Duration::from_secs(11)).await;
    }
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}
