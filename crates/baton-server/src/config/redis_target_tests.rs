use super::ServeConfig;
use baton_coord::RedisTarget;

#[test]
fn a_cluster_url_names_every_node() {
    let config = ServeConfig {
        redis_url: "redis+cluster://10.0.0.1:6379,10.0.0.2:6379/".into(),
        ..ServeConfig::default()
    };
    match config.redis_target() {
        RedisTarget::Cluster { nodes } => {
            assert_eq!(nodes, ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"],)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cluster_url_gives_every_node_its_user_and_tls() {
    let config = ServeConfig {
        redis_url: "rediss+cluster://baton:p%40ss@10.0.0.1:6379,10.0.0.2:6379".into(),
        ..ServeConfig::default()
    };
    match config.redis_target() {
        RedisTarget::Cluster { nodes } => assert_eq!(
            nodes,
            [
                "rediss://baton:p%40ss@10.0.0.1:6379",
                "rediss://baton:p%40ss@10.0.0.2:6379"
            ],
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_ca_file_without_tls_is_refused() {
    let file = std::env::temp_dir().join(format!("baton-ca-{}.pem", std::process::id()));
    std::fs::write(&file, "not read for its content").unwrap();
    let config = ServeConfig {
        redis_ca_file: Some(file.clone()),
        ..ServeConfig::default()
    };
    assert!(config.redis_access().unwrap_err().contains("--redis-tls"));
    let tls = ServeConfig {
        redis_url: "rediss://10.0.0.1:6380".into(),
        ..config
    };
    assert!(tls.redis_access().unwrap().ca_pem.is_some());
    std::fs::remove_file(file).unwrap();
}

#[test]
fn a_plain_url_is_one_server() {
    let config = ServeConfig::default();
    assert!(matches!(config.redis_target(), RedisTarget::Url(u) if u == config.redis_url));
}

#[test]
fn a_cluster_prefix_needs_a_hash_tag_and_a_single_server_does_not() {
    let cluster = |prefix: &str| ServeConfig {
        redis_cluster: vec!["10.0.0.1:6379".into()],
        redis_prefix: prefix.into(),
        ..ServeConfig::default()
    };
    let refused = cluster("baton:").redis_prefix_check().unwrap_err();
    assert!(refused.contains("{baton}:"), "{refused}");
    let empty = cluster("").redis_prefix_check().unwrap_err();
    assert!(empty.contains("'{baton}:'"), "{empty}");
    cluster("{baton}:").redis_prefix_check().unwrap();
    cluster("app:{bt-1}:").redis_prefix_check().unwrap();
    let single = ServeConfig {
        redis_prefix: "baton:".into(),
        ..ServeConfig::default()
    };
    single.redis_prefix_check().unwrap();
}
