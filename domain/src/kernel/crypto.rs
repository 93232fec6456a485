//! Encryption at rest for connection secrets: AES-256-GCM with a random
//! 96-bit nonce per encryption.
//!
//! A [`Keyring`] has one current key, used to encrypt, and any number of
//! old keys, kept only to decrypt what they encrypted. Each ciphertext is
//! stored with the id of its key (the first 16 hex digits of the key's
//! SHA-256), so keys can be rotated without a flag day: add the new key as
//! current, keep the old one in the old list until every secret has been
//! re-encrypted (see [`crate::catalogue::connections::Connections::reencrypt`]).
//!
//! The ciphertext is bound to where it is stored (associated data: tenant
//! and row id), so copying one row's ciphertext into another row, or another
//! tenant, does not decrypt.

use std::fmt;

use aes_gcm::{
    Aes256Gcm, Key, Nonce,
    aead::{Aead, KeyInit, Payload},
};
use base64::{Engine, engine::general_purpose::STANDARD};
use rand::RngCore;
use serde_json::Value;

use crate::{Error, Result, kernel::audit::sha256_hex};

const NONCE_LEN: usize = 12;

/// A secret handed out once (an API key, a signing secret): `prefix` and
/// 32 random bytes in hex.
pub fn random_secret(prefix: &str) -> String {
    format!("{prefix}{}", hex::encode(random_bytes()))
}

/// 32 random bytes (a key, a secret).
fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// A 256-bit key with its id. Its `Debug` shows only the id.
#[derive(Clone)]
pub struct EncryptionKey {
    id: String,
    key: Key<Aes256Gcm>,
}

impl EncryptionKey {
    /// Parse a base64 (standard alphabet) 32-byte key.
    pub fn from_base64(text: &str) -> Result<Self> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| Error::validation("an encryption key must be base64"))?;
        Self::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() != 32 {
            return Err(Error::validation(format!(
                "an encryption key must be 32 bytes, not {}",
                bytes.len()
            )));
        }
        let array: [u8; 32] = bytes
            .try_into()
            .map_err(|_| Error::validation("an encryption key must be 32 bytes"))?;
        Ok(Self {
            id: sha256_hex(bytes)[..16].to_owned(),
            key: Key::<Aes256Gcm>::from(array),
        })
    }

    /// A fresh random key, as base64 (what an embedded install keeps).
    pub fn generate_base64() -> String {
        let bytes = random_bytes();
        STANDARD.encode(bytes)
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptionKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// The current key and the old ones still accepted for decryption.
#[derive(Clone, Debug)]
pub struct Keyring {
    current: EncryptionKey,
    old: Vec<EncryptionKey>,
}

/// A sealed value: which key, and base64 of nonce ‖ ciphertext ‖ tag.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub ciphertext: String,
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl Keyring {
    pub fn new(current: EncryptionKey, old: Vec<EncryptionKey>) -> Self {
        Self { current, old }
    }

    pub fn current_key_id(&self) -> &str {
        self.current.id()
    }

    /// Encrypt `plaintext`, bound to `context` (associated data).
    pub fn seal(&self, plaintext: &[u8], context: &[u8]) -> Result<Sealed> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = Aes256Gcm::new(&self.current.key)
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: context,
                },
            )
            .map_err(|_| Error::internal("encryption failed"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ciphertext);
        Ok(Sealed {
            key_id: self.current.id.clone(),
            ciphertext: STANDARD.encode(out),
        })
    }

    /// Decrypt a sealed value with the key it names, checking `context`.
    pub fn open(&self, sealed: &Sealed, context: &[u8]) -> Result<Vec<u8>> {
        let key = std::iter::once(&self.current)
            .chain(&self.old)
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| {
                Error::internal(format!(
                    "no configured encryption key has id {}; add it to connection_encryption_old_keys",
                    sealed.key_id
                ))
            })?;
        let bytes = STANDARD
            .decode(&sealed.ciphertext)
            .map_err(|_| Error::internal("stored ciphertext is not base64"))?;
        if bytes.len() < NONCE_LEN {
            return Err(Error::internal("stored ciphertext is too short"));
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce
            .try_into()
            .map_err(|_| Error::internal("stored ciphertext is too short"))?;
        Aes256Gcm::new(&key.key)
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad: context,
                },
            )
            .map_err(|_| Error::internal("stored ciphertext does not decrypt (tampered or moved)"))
    }
}

/// A JSON value that must not be shown: `Debug` and `Display` print
/// `[REDACTED]`, and it is not `Serialize`, so it cannot slip into a log
/// line or a response by accident. Read it with [`SecretJson::expose`].
#[derive(Clone, PartialEq)]
pub struct SecretJson(Value);

impl SecretJson {
    pub fn new(value: Value) -> Self {
        Self(value)
    }

    /// The secret itself, for the code that must send it somewhere.
    pub fn expose(&self) -> &Value {
        &self.0
    }
}

impl fmt::Debug for SecretJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretJson([REDACTED])")
    }
}

impl fmt::Display for SecretJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key() -> EncryptionKey {
        EncryptionKey::from_base64(&EncryptionKey::generate_base64()).unwrap()
    }

    #[test]
    fn sealed_values_open_only_with_their_key_and_context() {
        let ring = Keyring::new(key(), vec![]);
        let sealed = ring.seal(b"hunter2", b"tenant-a/conn-1").unwrap();
        assert_eq!(sealed.key_id, ring.current_key_id());
        assert!(!sealed.ciphertext.contains("hunter2"));
        assert_eq!(ring.open(&sealed, b"tenant-a/conn-1").unwrap(), b"hunter2");
        assert!(ring.open(&sealed, b"tenant-b/conn-1").is_err());
        // Each encryption uses a fresh nonce.
        assert_ne!(
            ring.seal(b"hunter2", b"x").unwrap(),
            ring.seal(b"hunter2", b"x").unwrap()
        );
        // A flipped bit is detected.
        let mut bytes = STANDARD.decode(&sealed.ciphertext).unwrap();
        bytes[NONCE_LEN] ^= 1;
        let tampered = Sealed {
            ciphertext: STANDARD.encode(bytes),
            ..sealed.clone()
        };
        assert!(ring.open(&tampered, b"tenant-a/conn-1").is_err());
        // Another keyring cannot open it.
        assert!(
            Keyring::new(key(), vec![])
                .open(&sealed, b"tenant-a/conn-1")
                .is_err()
        );
    }

    #[test]
    fn rotation_keeps_old_ciphertexts_readable() {
        let old = key();
        let before = Keyring::new(old.clone(), vec![]);
        let sealed = before.seal(b"s", b"c").unwrap();
        let after = Keyring::new(key(), vec![old]);
        assert_eq!(after.open(&sealed, b"c").unwrap(), b"s");
        assert_ne!(after.seal(b"s", b"c").unwrap().key_id, sealed.key_id);
    }

    #[test]
    fn keys_must_be_32_bytes_of_base64_and_never_print() {
        assert!(EncryptionKey::from_base64("not base64!").is_err());
        assert!(EncryptionKey::from_base64(&STANDARD.encode([0u8; 16])).is_err());
        let text = STANDARD.encode([7u8; 32]);
        let k = EncryptionKey::from_base64(&text).unwrap();
        assert_eq!(k.id().len(), 16);
        assert!(!format!("{k:?}").contains(&text));
        let secret = SecretJson::new(json!({"password": "hunter2"}));
        assert!(!format!("{secret:?} {secret}").contains("hunter2"));
    }
}
