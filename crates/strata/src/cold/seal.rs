//! Encrypted segments: beside a store opened with a key, the cold tier
//! seals each segment's index and each compressed data block with
//! XChaCha20-Poly1305 under a key derived from the store key and the
//! directory's salt (the same derivation as sealed exports), so memories
//! that leave an encrypted database for the cold tier stay encrypted.
//!
//! # Files
//!
//! - `key.check`: the magic `STRCOLDK`, the directory's 16-byte salt, and a
//!   known text sealed under the derived key. Its presence makes the tier
//!   encrypted; opening it with a wrong key fails on the check, before any
//!   segment is read.
//! - `key.next`: written first by an encrypt, decrypt or rekey, and renamed
//!   over `key.check` (or removed with it) once every segment is
//!   converted. While it exists, the tier is half converted and opening it
//!   is an error that says to run the conversion again, which resumes.
//!   `STRCOLDP` alone in it means the target is plain.
//!
//! A sealed part is a 24-byte random nonce and the ciphertext with its
//! 16-byte tag; its associated data is the part's number (the block's
//! position, or one reserved for the index and one for the check), so parts
//! cannot be swapped within a segment without the open failing.

use std::path::Path;

use crate::store::StoreKey;
use crate::{Error, Result};

/// The directory's key file.
pub(super) const KEY_CHECK: &str = "key.check";
/// The key file of a conversion under way.
pub(super) const KEY_NEXT: &str = "key.next";
const KEY_MAGIC: &[u8; 8] = b"STRCOLDK";
const PLAIN_MAGIC: &[u8; 8] = b"STRCOLDP";
const CHECK_TEXT: &[u8] = b"strata cold tier key check";
/// The part number of a segment's index.
pub(super) const PART_INDEX: u64 = u64::MAX;
const PART_CHECK: u64 = u64::MAX - 1;
/// Bytes a sealed part adds to its plaintext (nonce and tag).
#[cfg(all(test, feature = "encryption"))]
pub(super) const OVERHEAD: usize = 24 + 16;

/// What a key file says the tier's segments are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum KeyFile {
    /// Plain (only in `key.next`: a decrypt under way).
    Plain,
    /// Sealed under the key that opens `check` with `salt`.
    Keyed { salt: [u8; 16], check: Vec<u8> },
}

impl KeyFile {
    /// The key file whose bytes (if there is one) were read from `path`.
    pub(super) fn parse(bytes: Option<Vec<u8>>, path: &Path) -> Result<Option<KeyFile>> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let bad = |why: &str| Error::Corrupt {
            what: format!("cold tier key file {}", path.display()),
            source: why.to_string().into(),
        };
        if bytes.as_slice() == PLAIN_MAGIC {
            return Ok(Some(KeyFile::Plain));
        }
        if bytes.len() < 8 + 16 || &bytes[..8] != KEY_MAGIC {
            return Err(bad("not a strata cold tier key file"));
        }
        let salt: [u8; 16] = bytes[8..24].try_into().unwrap();
        Ok(Some(KeyFile::Keyed {
            salt,
            check: bytes[24..].to_vec(),
        }))
    }

    /// The file's bytes.
    pub(super) fn bytes(&self) -> Vec<u8> {
        match self {
            KeyFile::Plain => PLAIN_MAGIC.to_vec(),
            KeyFile::Keyed { salt, check } => [&KEY_MAGIC[..], salt, check].concat(),
        }
    }

    /// The segment key `key` gives for this file; an error naming the
    /// key's source when it is the wrong one.
    pub(super) fn unlock(&self, key: &StoreKey, dir: &Path) -> Result<SegKey> {
        let KeyFile::Keyed { salt, check } = self else {
            return Err(Error::InvalidConfig(format!(
                "the cold tier at {} is plain",
                dir.display()
            )));
        };
        let k = SegKey::derive(key, *salt)?;
        match k.open(PART_CHECK, check) {
            Some(t) if t == CHECK_TEXT => Ok(k),
            _ => Err(Error::InvalidConfig(format!(
                "the cold tier at {} cannot be read with the key from {}: the key is wrong (or \
                 its {KEY_CHECK} is damaged)",
                dir.display(),
                key.source()
            ))),
        }
    }
}

/// A segment key: the store key stretched with a directory's salt.
pub(crate) struct SegKey {
    salt: [u8; 16],
    #[cfg(feature = "encryption")]
    cipher: chacha20poly1305::XChaCha20Poly1305,
    #[cfg(not(feature = "encryption"))]
    never: std::convert::Infallible,
}

impl std::fmt::Debug for SegKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegKey")
    }
}

#[cfg(feature = "encryption")]
impl SegKey {
    /// The key for `salt`.
    pub(super) fn derive(key: &StoreKey, salt: [u8; 16]) -> Result<SegKey> {
        Ok(SegKey {
            salt,
            cipher: crate::sealed::cipher(key, &salt),
        })
    }

    /// A key with a fresh random salt, and the key file that opens it.
    pub(super) fn fresh(key: &StoreKey) -> Result<(SegKey, KeyFile)> {
        use chacha20poly1305::aead::{OsRng, rand_core::RngCore};
        let mut salt = [0u8; 16];
        OsRng.fill_bytes(&mut salt);
        let k = SegKey::derive(key, salt)?;
        let check = k.seal(PART_CHECK, CHECK_TEXT);
        Ok((k, KeyFile::Keyed { salt, check }))
    }

    /// `plain` sealed as part `part`.
    pub(super) fn seal(&self, part: u64, plain: &[u8]) -> Vec<u8> {
        use chacha20poly1305::aead::{Aead, AeadCore, OsRng, Payload};
        let nonce = chacha20poly1305::XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let ct = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plain,
                    aad: &part.to_le_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any length a segment holds");
        [nonce.as_slice(), &ct].concat()
    }

    /// Part `part` opened; `None` when its bytes or its tag are wrong.
    pub(super) fn open(&self, part: u64, sealed: &[u8]) -> Option<Vec<u8>> {
        use chacha20poly1305::aead::{Aead, Payload};
        if sealed.len() < 24 + 16 {
            return None;
        }
        let (nonce, ct) = sealed.split_at(24);
        self.cipher
            .decrypt(
                chacha20poly1305::XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: &part.to_le_bytes(),
                },
            )
            .ok()
    }
}

#[cfg(not(feature = "encryption"))]
impl SegKey {
    fn unbuilt() -> Error {
        Error::InvalidConfig(
            "an encrypted cold tier needs a strata built with encryption at rest (cargo feature \
             `encryption`)"
                .into(),
        )
    }

    pub(super) fn derive(_key: &StoreKey, _salt: [u8; 16]) -> Result<SegKey> {
        Err(SegKey::unbuilt())
    }

    pub(super) fn fresh(_key: &StoreKey) -> Result<(SegKey, KeyFile)> {
        Err(SegKey::unbuilt())
    }

    pub(super) fn seal(&self, _part: u64, _plain: &[u8]) -> Vec<u8> {
        match self.never {}
    }

    pub(super) fn open(&self, _part: u64, _sealed: &[u8]) -> Option<Vec<u8>> {
        match self.never {}
    }
}

impl SegKey {
    /// The salt it was derived with (written in each segment it seals).
    pub(super) fn salt(&self) -> &[u8; 16] {
        &self.salt
    }
}
