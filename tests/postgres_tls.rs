//! Postgres over TLS with `sslmode=verify-full`: a node reaches a Postgres that takes TLS
//! connections only, checking its certificate against the test's CA and its name, given
//! in the database URL or as libpq's `PGSSLMODE`/`PGSSLROOTCERT` (how the Helm chart
//! gives it); a node told to trust another CA is refused and says why.

use baton_localcluster::testing as support;

use std::time::Duration;
use support::services::PostgresProc;
use support::tls::TestCa;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_verifies_postgres_and_refuses_a_server_its_ca_did_not_sign() {
    let dir = std::env::temp_dir().join(format!("baton-pg-tls-{}", uuid::Uuid::new_v4().simple()));
    let ca = TestCa::new(&dir, "ca");
    let stranger = TestCa::new(&dir, "stranger");
    let pg = PostgresProc::start_tls(&ca.server_cert("postgres")).await;
    let verify = |ca: &TestCa| format!("sslmode=verify-full&sslrootcert={}", ca.cert.display());
    let admin = format!("{}?{}", pg.admin_url(), verify(&ca));
    let env = TestEnv::with_servers("postgres-tls", &admin, &redis_url()).await;
    assert!(
        env.database_url.contains("sslmode=verify-full"),
        "{}",
        env.database_url
    );

    // The parameters in the URL.
    let in_url = env.node().await;
    // libpq's variables, with a URL that has none: the chart's way.
    let mut plain_url = reqwest::Url::parse(&env.database_url).unwrap();
    plain_url.set_query(None);
    let in_env = NodeProc::start_with_env(
        &env,
        &["--database-url", plain_url.as_str()],
        &[
            ("PGSSLMODE".into(), "verify-full".into()),
            ("PGSSLROOTCERT".into(), ca.cert.display().to_string()),
        ],
    )
    .await;
    a_task_runs(&env, &in_url, &in_env).await;

    // Every connection to the test's database is TLS (the server takes no other over TCP).
    let plain: Option<i64> = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.datname = $1",
    )
    .bind(&env.database)
    .fetch_one(&mut env.db().await)
    .await
    .unwrap();
    assert_eq!(plain, Some(0));

    // A CA that did not sign the server's certificate: the node cannot trust it.
    let mut wrong_ca = plain_url.clone();
    wrong_ca.set_query(Some(&verify(&stranger)));
    let refused = NodeProc::start_unready(
        &env,
        &["--no-migrate", "--database-url", wrong_ca.as_str()],
        &[],
    )
    .await;
    let http = reqwest::Client::new();
    let readyz = format!("{}/readyz", refused.url);
    wait_for(
        "the node to refuse a Postgres it cannot trust",
        Duration::from_secs(20),
        || async {
            let answer = http.get(&readyz).send().await.ok()?;
            let status = answer.status();
            let body = answer.text().await.ok()?;
            let log = std::fs::read_to_string(&refused.log).ok()?;
            (status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && body.contains("postgres unavailable")
                && log.contains("UnknownIssuer"))
            .then_some(())
        },
    )
    .await;
    drop((in_url, in_env, refused));
    let _ = std::fs::remove_dir_all(dir);
}
