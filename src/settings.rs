//! Settings layering (design.md §8): defaults, then a TOML file, then `BATON_*` variables
//! and flags. Clap reads each flag's environment twin, so by the time the arguments get
//! here they already hold "flag, else variable"; unset ones are dropped so they cannot
//! mask the file.

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;

pub fn load<T>(file: Option<&Path>, args: &impl Serialize) -> anyhow::Result<T>
where
    T: Default + Serialize + DeserializeOwned,
{
    let mut figment = Figment::from(Serialized::defaults(T::default()));
    if let Some(file) = file {
        figment = figment.merge(Toml::file_exact(file));
    }
    let overrides = without_nulls(serde_json::to_value(args)?);
    Ok(figment.merge(Serialized::defaults(overrides)).extract()?)
}

fn without_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => map
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, without_nulls(v)))
            .collect(),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_server::ServeConfig;
    use baton_server::config::Limits;

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("baton-cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("baton.toml");
        std::fs::write(
            &file,
            "redis_prefix = \"{file}:\"\nnode_ttl_ms = 3000\n[limits]\nmax_batch = 10\n",
        )
        .unwrap();
        let flags = serde_json::json!({ "node_ttl_ms": 4000, "node_id": null });
        let cfg: ServeConfig = load(Some(&file), &flags).unwrap();
        assert_eq!(cfg.redis_prefix, "{file}:");
        assert_eq!(
            cfg.node_ttl_ms, 4000,
            "flags and variables win over the file"
        );
        assert_eq!(cfg.node_id, None, "an unset flag does not mask anything");
        assert_eq!(cfg.limits.max_batch, 10);
        assert_eq!(cfg.limits.max_env_vars, Limits::default().max_env_vars);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn misspelt_settings_are_refused() {
        let flags = serde_json::json!({ "node_tll_ms": 4000 });
        assert!(load::<ServeConfig>(None, &flags).is_err());
    }
}
