//! Webhook signatures in the Standard Webhooks format (<https://www.standardwebhooks.com>),
//! so a receiver can tell a delivery came from this cluster and was not altered or
//! replayed later, with a library it may already have: HMAC-SHA256 with the cluster's
//! key over `{webhook-id}.{webhook-timestamp}.{body}`, sent as `webhook-signature:
//! v1,<base64>`. The key is written `whsec_` + base64, as those libraries take it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a secret written as Standard Webhooks libraries take it.
const PREFIX: &str = "whsec_";

/// Shorter keys are refused: HMAC-SHA256's strength is bounded by its key's.
const MIN_KEY_BYTES: usize = 16;

/// A generated key's length, as the specification suggests (24 to 64 bytes).
const GENERATED_KEY_BYTES: usize = 32;

/// The key webhooks are signed with. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SigningKey(Vec<u8>);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

impl SigningKey {
    /// `whsec_` + base64, or any other string taken as the key's bytes.
    pub(crate) fn parse(secret: &str) -> Result<Self, String> {
        let key = match secret.strip_prefix(PREFIX) {
            Some(encoded) => STANDARD.decode(encoded).map_err(|e| {
                format!("webhook secret: `{PREFIX}` must be followed by base64 ({e})")
            })?,
            None => secret.as_bytes().to_vec(),
        };
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "webhook secret: at least {MIN_KEY_BYTES} bytes of key are needed, got {}",
                key.len()
            ));
        }
        Ok(SigningKey(key))
    }

    /// A fresh random key (the thread's generator is a CSPRNG, seeded by the OS).
    pub(crate) fn generate() -> Self {
        SigningKey(rand::random::<[u8; GENERATED_KEY_BYTES]>().to_vec())
    }

    /// The key as receivers configure it: `whsec_` + base64, whatever form it was given in.
    pub(crate) fn to_whsec(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.0))
    }

    /// The `webhook-signature` header's value for one delivery.
    pub(crate) fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_the_specifications_test_vector() {
        // What the reference libraries compute: a receiver's library accepts ours.
        let key = SigningKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            key.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_raw_secret_is_shown_to_receivers_in_the_whsec_form() {
        let raw = SigningKey::parse("a raw secret of some length").unwrap();
        let shown = raw.to_whsec();
        assert!(shown.starts_with("whsec_"));
        assert_eq!(SigningKey::parse(&shown).unwrap(), raw);
        assert_eq!(
            raw.sign("id", 1, b"{}"),
            SigningKey::parse(&shown).unwrap().sign("id", 1, b"{}")
        );
    }

    #[test]
    fn weak_or_malformed_secrets_are_refused_and_keys_never_print() {
        assert!(SigningKey::parse("short").is_err());
        assert!(SigningKey::parse("whsec_not*base64").is_err());
        assert!(SigningKey::parse("whsec_c2hvcnQ=").is_err(), "5 bytes");
        let key = SigningKey::generate();
        assert_ne!(key, SigningKey::generate());
        assert_eq!(format!("{key:?}"), "SigningKey(***)");
    }
}
