//! Sealed streams: what an encrypted store writes outside its database
//! file (exports) is encrypted with the store's key, XChaCha20-Poly1305 in
//! frames, so an export is no weaker than the store it came from.
//!
//! Layout: the magic `STRATA-SEALED1\n` (15 bytes), a 16-byte random salt,
//! then frames of `length: u32 LE` (the high bit marks the last frame),
//! a 24-byte random nonce and the ciphertext with its 16-byte tag. Each
//! frame's associated data is its index and whether it is the last, so
//! frames cannot be reordered, dropped or cut off at a frame boundary
//! without the open failing. The frame key is PBKDF2-HMAC-SHA256 of the
//! store key and the salt: one round for a raw 256-bit key, 600,000 for a
//! passphrase.

use std::io::{Read, Write};

use crate::Result;
use crate::error::Error;
use crate::store::StoreKey;

/// The first bytes of a sealed stream.
pub const SEALED_MAGIC: &[u8] = b"STRATA-SEALED1\n";

/// Whether `head` (the first bytes of a file or stream) starts a sealed
/// stream.
pub fn is_sealed(head: &[u8]) -> bool {
    head.starts_with(SEALED_MAGIC)
}

#[cfg(feature = "encryption")]
mod imp {
    use super::*;
    use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload, rand_core::RngCore};
    use chacha20poly1305::{XChaCha20Poly1305, XNonce};

    const FRAME: usize = 64 * 1024;
    const LAST: u32 = 1 << 31;

    /// The XChaCha20-Poly1305 key derived from `key` and `salt` (also the
    /// cold tier's segment key).
    pub(crate) fn cipher(key: &StoreKey, salt: &[u8]) -> XChaCha20Poly1305 {
        let rounds = if key.is_raw() { 1 } else { 600_000 };
        let mut k = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<sha2::Sha256>(key.secret_bytes(), salt, rounds, &mut k);
        XChaCha20Poly1305::new(&k.into())
    }

    fn aad(index: u64, last: bool) -> [u8; 9] {
        let mut a = [0u8; 9];
        a[..8].copy_from_slice(&index.to_le_bytes());
        a[8] = u8::from(last);
        a
    }

    /// A writer that seals what is written to it into `out`; call
    /// [`Sealer::finish`] to write the last frame.
    pub struct Sealer<W: Write> {
        out: W,
        cipher: XChaCha20Poly1305,
        buf: Vec<u8>,
        index: u64,
    }

    impl<W: Write> std::fmt::Debug for Sealer<W> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Sealer")
                .field("frames", &self.index)
                .finish()
        }
    }

    impl<W: Write> Sealer<W> {
        /// Starts a sealed stream on `out` under `key`.
        pub fn new(mut out: W, key: &StoreKey) -> Result<Sealer<W>> {
            let mut salt = [0u8; 16];
            OsRng.fill_bytes(&mut salt);
            out.write_all(SEALED_MAGIC)
                .and_then(|()| out.write_all(&salt))
                .map_err(|e| Error::io("writing a sealed stream", e))?;
            Ok(Sealer {
                out,
                cipher: cipher(key, &salt),
                buf: Vec::with_capacity(FRAME),
                index: 0,
            })
        }

        fn frame(&mut self, last: bool) -> std::io::Result<()> {
            let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
            let a = aad(self.index, last);
            let ct = self
                .cipher
                .encrypt(
                    &nonce,
                    Payload {
                        msg: &self.buf,
                        aad: &a,
                    },
                )
                .map_err(|_| std::io::Error::other("sealing failed"))?;
            let len = u32::try_from(ct.len()).map_err(std::io::Error::other)?
                | if last { LAST } else { 0 };
            self.out.write_all(&len.to_le_bytes())?;
            self.out.write_all(&nonce)?;
            self.out.write_all(&ct)?;
            self.buf.clear();
            self.index += 1;
            Ok(())
        }

        /// Writes the last frame and flushes; returns the inner writer.
        pub fn finish(mut self) -> Result<W> {
            self.frame(true)
                .and_then(|()| self.out.flush())
                .map_err(|e| Error::io("writing a sealed stream", e))?;
            Ok(self.out)
        }
    }

    impl<W: Write> Write for Sealer<W> {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let room = FRAME - self.buf.len();
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            if self.buf.len() == FRAME {
                self.frame(false)?;
            }
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.out.flush()
        }
    }

    /// Reads a whole sealed stream (its magic included) and returns what
    /// was sealed. A wrong key, a changed byte, a missing or reordered
    /// frame, or a stream cut short is an error; nothing is returned.
    pub fn open(input: &mut dyn Read, key: &StoreKey) -> Result<Vec<u8>> {
        let bad = |what: &str| Error::InvalidImport {
            line: 0,
            reason: format!("sealed stream: {what}"),
        };
        let mut head = [0u8; 15 + 16];
        input
            .read_exact(&mut head)
            .map_err(|_| bad("shorter than its header"))?;
        if !is_sealed(&head) {
            return Err(bad("not a sealed stream"));
        }
        let c = cipher(key, &head[15..]);
        let mut out = Vec::new();
        let mut index = 0u64;
        loop {
            let mut len = [0u8; 4];
            input
                .read_exact(&mut len)
                .map_err(|_| bad("cut short (its last frame is missing)"))?;
            let len = u32::from_le_bytes(len);
            let last = len & LAST != 0;
            let n = (len & !LAST) as usize;
            if n > FRAME + 16 {
                return Err(bad("a frame longer than any sealer writes"));
            }
            let mut nonce = [0u8; 24];
            let mut ct = vec![0u8; n];
            input
                .read_exact(&mut nonce)
                .and_then(|()| input.read_exact(&mut ct))
                .map_err(|_| bad("cut short inside a frame"))?;
            let a = aad(index, last);
            let pt = c
                .decrypt(XNonce::from_slice(&nonce), Payload { msg: &ct, aad: &a })
                .map_err(|_| {
                    Error::InvalidConfig(format!(
                        "this export cannot be opened with the key from {} (a wrong key, or the \
                         file was changed)",
                        key.source()
                    ))
                })?;
            out.extend_from_slice(&pt);
            index += 1;
            if last {
                let mut rest = [0u8; 1];
                if input.read(&mut rest).map_err(|e| Error::io("reading", e))? > 0 {
                    return Err(bad("bytes after its last frame"));
                }
                return Ok(out);
            }
        }
    }
}

#[cfg(feature = "encryption")]
pub(crate) use imp::cipher;
#[cfg(feature = "encryption")]
pub use imp::{Sealer, open};

/// Without the `encryption` feature: a sealed stream cannot be opened.
#[cfg(not(feature = "encryption"))]
pub fn open(_input: &mut dyn Read, _key: &StoreKey) -> Result<Vec<u8>> {
    Err(Error::InvalidConfig(
        "this export is sealed with a store key: reading it needs a strata built with \
         encryption at rest (cargo feature `encryption`)"
            .into(),
    ))
}

/// Without the `encryption` feature there is no sealer; this keeps
/// `Write` in use for the signature above.
#[cfg(not(feature = "encryption"))]
#[allow(dead_code)]
fn _unused(_: &mut dyn Write) {}

#[cfg(all(test, feature = "encryption"))]
mod tests {
    use super::*;

    fn key(k: &str) -> StoreKey {
        StoreKey::new(k, "the test").unwrap()
    }

    fn seal(data: &[u8], k: &StoreKey) -> Vec<u8> {
        let mut s = Sealer::new(Vec::new(), k).unwrap();
        s.write_all(data).unwrap();
        s.finish().unwrap()
    }

    #[test]
    fn round_trips_and_refuses_every_change() {
        let raw = key(&"ab".repeat(32));
        for size in [0usize, 10, 64 * 1024, 200_000] {
            let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            let sealed = seal(&data, &raw);
            assert!(is_sealed(&sealed));
            assert_eq!(open(&mut sealed.as_slice(), &raw).unwrap(), data);
            if size > 0 {
                assert!(
                    !sealed
                        .windows(8.min(size))
                        .any(|w| w == &data[..8.min(size)])
                        || size < 8
                );
            }
        }
        let data = vec![b'x'; 200_000];
        let sealed = seal(&data, &raw);
        // A wrong key names where the key came from.
        let e = open(&mut sealed.as_slice(), &key(&"cd".repeat(32))).unwrap_err();
        assert!(e.to_string().contains("the key from the test"), "{e}");
        // A changed byte, a cut at a frame boundary, a dropped frame.
        let mut flipped = sealed.clone();
        let at = flipped.len() / 2;
        flipped[at] ^= 1;
        assert!(open(&mut flipped.as_slice(), &raw).is_err());
        let first_frame = 15 + 16 + 4 + 24 + 64 * 1024 + 16;
        assert!(open(&mut &sealed[..first_frame], &raw).is_err());
        let mut dropped = sealed[..15 + 16].to_vec();
        dropped.extend_from_slice(&sealed[first_frame..]);
        assert!(open(&mut dropped.as_slice(), &raw).is_err());
        let mut extra = sealed.clone();
        extra.push(0);
        assert!(open(&mut extra.as_slice(), &raw).is_err());
    }

    #[test]
    fn a_passphrase_works_too() {
        let k = key("correct horse battery staple");
        let sealed = seal(b"hello", &k);
        assert_eq!(open(&mut sealed.as_slice(), &k).unwrap(), b"hello");
    }
}
