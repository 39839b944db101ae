//! `secret_env` at rest: each value is sealed with AES-256-GCM under the cluster's
//! secrets key before it reaches Postgres, and opened only to go to the runner whose
//! start was recorded. A database dump, a replica or a backup holds ciphertext; the key
//! lives with the nodes (a file or the environment), never in Postgres.
//!
//! A sealed value reads `sealed:v1:<key id>:<base64 of nonce ‖ ciphertext ‖ tag>`. The
//! key id (the first 4 bytes of SHA-256 over the key, in hex) names the key that sealed
//! it, so keys can be rotated: the first key of the ring seals, every key of it opens
//! (docs/security.md, "Rotating the secrets key"). The task's id and the variable's name
//! are the associated data: a value copied into another task's row, or under another
//! name, does not open.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use uuid::Uuid;

const SEALED_PREFIX: &str = "sealed:v1:";

/// The keys a node seals and opens `secret_env` with: the first seals, all open.
pub(crate) struct SecretsKeyring {
    keys: Vec<SecretsKey>,
    random: SystemRandom,
}

struct SecretsKey {
    id: String,
    key: LessSafeKey,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum KeyringError {
    #[error("the secrets key holds no key")]
    Empty,
    #[error(
        "secrets key {index}: not base64 of 32 bytes (make one with `openssl rand -base64 32`)"
    )]
    Malformed { index: usize },
}

/// Why a sealed value did not open: the node lacks its key, or it was tampered with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum OpenError {
    #[error("secret_env {name}: sealed under key {key_id}, which this node does not hold")]
    UnknownKey { name: String, key_id: String },
    #[error("secret_env {name}: does not open (altered, or sealed for another task)")]
    Corrupt { name: String },
}

impl SecretsKeyring {
    /// Keys as base64 of 32 bytes each, one per line or comma-separated; `#` starts a
    /// comment. The first is the one that seals.
    pub(crate) fn parse(text: &str) -> Result<SecretsKeyring, KeyringError> {
        let keys = text
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .enumerate()
            .map(|(index, encoded)| {
                let bytes = STANDARD
                    .decode(encoded)
                    .ok()
                    .filter(|b| b.len() == 32)
                    .ok_or(KeyringError::Malformed { index: index + 1 })?;
                let id = hex::encode(&Sha256::digest(&bytes)[..4]);
                let key =
                    UnboundKey::new(&AES_256_GCM, &bytes).expect("32 bytes is an AES-256 key");
                Ok(SecretsKey {
                    id,
                    key: LessSafeKey::new(key),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(KeyringError::Empty);
        }
        Ok(SecretsKeyring {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// The id of the key that seals.
    pub(crate) fn sealing_key_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Every value sealed for `task`, the names as they were.
    pub(crate) fn seal(
        &self,
        task: Uuid,
        env: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let key = &self.keys[0];
        env.into_iter()
            .map(|(name, value)| {
                let mut nonce = [0u8; NONCE_LEN];
                self.random
                    .fill(&mut nonce)
                    .expect("the system's random source answers");
                let mut sealed = value.into_bytes();
                key.key
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(associated_data(task, &name)),
                        &mut sealed,
                    )
                    .expect("AES-GCM seals any value under 64 GiB");
                let mut out = nonce.to_vec();
                out.extend_from_slice(&sealed);
                let value = format!("{SEALED_PREFIX}{}:{}", key.id, STANDARD.encode(out));
                (name, value)
            })
            .collect()
    }
}

/// `task`'s `secret_env` as submitted, opened with `ring`'s keys, or with none (a node
/// without a key still hands out values stored before sealing existed, which come back as
/// they are; a sealed one it cannot open).
pub(crate) fn open(
    ring: Option<&SecretsKeyring>,
    task: Uuid,
    env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, OpenError> {
    let keys = ring.map_or(&[][..], |r| &r.keys);
    env.iter()
        .map(|(name, value)| Ok((name.clone(), open_one(keys, task, name, value)?)))
        .collect()
}

fn open_one(keys: &[SecretsKey], task: Uuid, name: &str, value: &str) -> Result<String, OpenError> {
    let Some(rest) = value.strip_prefix(SEALED_PREFIX) else {
        return Ok(value.to_string());
    };
    let corrupt = || OpenError::Corrupt {
        name: name.to_string(),
    };
    let (key_id, encoded) = rest.split_once(':').ok_or_else(corrupt)?;
    let key = keys
        .iter()
        .find(|k| k.id == key_id)
        .ok_or_else(|| OpenError::UnknownKey {
            name: name.to_string(),
            key_id: key_id.to_string(),
        })?;
    let mut bytes = STANDARD.decode(encoded).map_err(|_| corrupt())?;
    if bytes.len() < NONCE_LEN {
        return Err(corrupt());
    }
    let mut sealed = bytes.split_off(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(&bytes).map_err(|_| corrupt())?;
    let plain = key
        .key
        .open_in_place(nonce, Aad::from(associated_data(task, name)), &mut sealed)
        .map_err(|_| corrupt())?;
    String::from_utf8(plain.to_vec()).map_err(|_| corrupt())
}

/// The node's keyring from its settings: `secrets_key`, else the file
/// `secrets_key_file`; `None` when neither is set.
pub(crate) fn keyring_of(config: &crate::ServeConfig) -> Result<Option<SecretsKeyring>, String> {
    // A blank setting is no setting (`BATON_SECRETS_KEY=` unsets it).
    let given = config.secrets_key.as_ref().filter(|t| !t.trim().is_empty());
    let text = match (given, &config.secrets_key_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the secrets key file {}: {e}", path.display()))?,
        (None, None) => return Ok(None),
    };
    SecretsKeyring::parse(&text)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// What binds a sealed value to its place: the task's id and the variable's name.
fn associated_data(task: Uuid, name: &str) -> Vec<u8> {
    let mut aad = task.as_bytes().to_vec();
    aad.extend_from_slice(name.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> String {
        STANDARD.encode([7u8; 32])
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_sealed_value_opens_for_its_task_and_name_only() {
        let ring = SecretsKeyring::parse(&key()).unwrap();
        let task = Uuid::now_v7();
        let sealed = ring.seal(task, env(&[("TOKEN", "hunter2"), ("OTHER", "x")]));
        assert!(sealed["TOKEN"].starts_with("sealed:v1:"));
        assert!(!sealed["TOKEN"].contains("hunter2"));
        assert_eq!(
            open(Some(&ring), task, &sealed).unwrap(),
            env(&[("TOKEN", "hunter2"), ("OTHER", "x")])
        );
        // Copied into another task's row, or under another name: it does not open.
        assert!(matches!(
            open(Some(&ring), Uuid::now_v7(), &sealed),
            Err(OpenError::Corrupt { .. })
        ));
        let swapped = env(&[("OTHER", &sealed["TOKEN"])]);
        assert!(matches!(
            open(Some(&ring), task, &swapped),
            Err(OpenError::Corrupt { .. })
        ));
    }

    #[test]
    fn the_same_value_seals_differently_each_time() {
        let ring = SecretsKeyring::parse(&key()).unwrap();
        let task = Uuid::now_v7();
        let a = ring.seal(task, env(&[("T", "same")]));
        let b = ring.seal(task, env(&[("T", "same")]));
        assert_ne!(a["T"], b["T"]);
    }

    #[test]
    fn a_rotated_ring_opens_what_the_old_key_sealed() {
        let old = SecretsKeyring::parse(&key()).unwrap();
        let new_key = STANDARD.encode([9u8; 32]);
        let task = Uuid::now_v7();
        let sealed = old.seal(task, env(&[("T", "v")]));
        let rotated = SecretsKeyring::parse(&format!("{new_key}\n{}  # retired\n", key())).unwrap();
        assert_ne!(rotated.sealing_key_id(), old.sealing_key_id());
        assert_eq!(
            open(Some(&rotated), task, &sealed).unwrap(),
            env(&[("T", "v")])
        );
        let without_old = SecretsKeyring::parse(&new_key).unwrap();
        assert!(matches!(
            open(Some(&without_old), task, &sealed),
            Err(OpenError::UnknownKey { .. })
        ));
    }

    #[test]
    fn a_tampered_value_does_not_open() {
        let ring = SecretsKeyring::parse(&key()).unwrap();
        let task = Uuid::now_v7();
        let mut sealed = ring.seal(task, env(&[("T", "value")]));
        let v = sealed.get_mut("T").unwrap();
        let flipped = if v.ends_with('A') { 'B' } else { 'A' };
        v.pop();
        v.push(flipped);
        assert!(open(Some(&ring), task, &sealed).is_err());
    }

    #[test]
    fn malformed_keys_are_refused_with_their_position() {
        assert_eq!(SecretsKeyring::parse("").err(), Some(KeyringError::Empty));
        assert_eq!(
            SecretsKeyring::parse(&format!("{},short", key())).err(),
            Some(KeyringError::Malformed { index: 2 })
        );
    }

    #[test]
    fn values_stored_before_sealing_pass_through() {
        let ring = SecretsKeyring::parse(&key()).unwrap();
        let plain = env(&[("T", "old plaintext")]);
        assert_eq!(open(Some(&ring), Uuid::now_v7(), &plain).unwrap(), plain);
    }
}
