//! Bearer tokens and what they allow.
//!
//! A token is a random string handed to a client once; the configuration
//! keeps only its SHA-256, its scope prefixes and its access. A request's
//! token resolves to a [`Grant`]; handlers ask the grant before they call the
//! engine. Reads name a view, and every entry of it must lie inside the
//! grant's prefixes; id-addressed routes load the memory first and answer
//! "not found" when it lies outside, so a token never learns what exists
//! beyond its scopes.
//!
//! A token may carry an expiry and a rate limit ([`Entry`]); the table
//! of tokens ([`TokenTable`]) is swapped whole when the configuration is
//! reloaded, so a revoked token is refused by the next request.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata::{Fence, Scope, View, ViewEntry};

use crate::config::TokenConfig;
use crate::error::ConfigError;

/// What a token may do inside its scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Reads only.
    #[default]
    Read,
    /// Reads and writes.
    ReadWrite,
    /// Reads and writes, and the server's own figures: `/metrics` with
    /// the store's counts.
    Admin,
}

impl Access {
    /// The word the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::ReadWrite => "read_write",
            Access::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Access {
    type Err = String;
    fn from_str(s: &str) -> Result<Access, String> {
        match s {
            "read" => Ok(Access::Read),
            "read_write" => Ok(Access::ReadWrite),
            "admin" => Ok(Access::Admin),
            _ => Err(format!("`{s}` is not one of read, read_write, admin")),
        }
    }
}

/// What one request may see and do. Every request carries a copy, so the
/// name and prefixes are shared rather than copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The token's name (`None` without authentication).
    pub name: Option<Arc<str>>,
    /// Scope prefixes; `None` allows every scope (no authentication, or the
    /// MCP server on stdio, which runs as the local user).
    pub prefixes: Option<Arc<[Scope]>>,
    /// Read or read-write.
    pub access: Access,
}

impl Grant {
    /// Everything: serving without authentication, or stdio.
    pub fn all() -> Grant {
        Grant {
            name: None,
            prefixes: None,
            access: Access::ReadWrite,
        }
    }

    /// The local user's grant (the MCP server on stdio): everything, as
    /// `local:<user>` in the audit trail, with the admin's reads.
    pub fn local() -> Grant {
        Grant {
            name: Some(strata::local_actor().into()),
            prefixes: None,
            access: Access::Admin,
        }
    }

    /// The scopes the grant covers, for the engine's operations that
    /// resolve ids and sessions themselves (import, sessions).
    pub fn fence(&self) -> Fence {
        match &self.prefixes {
            None => Fence::everything(),
            Some(ps) => Fence::within(ps.clone()),
        }
    }

    /// Whether the grant covers every scope.
    pub fn is_unrestricted(&self) -> bool {
        self.prefixes.is_none()
    }

    /// Whether a memory in `scope` may be seen (and, with write access,
    /// changed).
    pub fn allows_scope(&self, scope: &Scope) -> bool {
        match &self.prefixes {
            None => true,
            Some(ps) => ps.iter().any(|p| scope.is_within(p)),
        }
    }

    /// Whether everything a view entry can see lies inside the grant: its
    /// scope is within a prefix (then so is everything below it).
    pub fn allows_entry(&self, e: &ViewEntry) -> bool {
        self.allows_scope(&e.scope)
    }

    /// The first entry of `view` that reaches outside the grant.
    pub fn first_outside<'v>(&self, view: &'v View) -> Option<&'v ViewEntry> {
        view.entries().iter().find(|e| !self.allows_entry(e))
    }

    /// Whether writes are allowed.
    pub fn can_write(&self) -> bool {
        matches!(self.access, Access::ReadWrite | Access::Admin)
    }

    /// Whether the server's own figures may be read: an admin token, or
    /// no authentication.
    pub fn is_admin(&self) -> bool {
        self.name.is_none() || self.access == Access::Admin
    }
}

/// A configured token: its grant and the bounds checked on each request.
#[derive(Clone, Debug)]
pub struct Entry {
    /// What it allows.
    pub grant: Grant,
    /// When it stops working.
    pub expires_at: Option<jiff::Timestamp>,
    /// Most requests a minute.
    pub rate_limit_per_minute: Option<u32>,
}

/// The configured tokens, by the SHA-256 of the secret.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], Entry>,
}

impl Tokens {
    /// Validates `[[server.tokens]]`; errors name the token and the key.
    pub fn from_config(tokens: &[TokenConfig]) -> Result<Tokens, ConfigError> {
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (i, t) in tokens.iter().enumerate() {
            let at = format!("server.tokens[{i}] (`{}`)", t.name);
            if t.name.trim().is_empty() {
                return Err(ConfigError(format!("server.tokens[{i}].name: empty")));
            }
            if !names.insert(t.name.as_str()) {
                return Err(ConfigError(format!("{at}.name: used by two tokens")));
            }
            let Some(h) = digest_of_hex(&t.secret_sha256) else {
                return Err(ConfigError(format!(
                    "{at}.secret_sha256: expected 64 hex digits (the SHA-256 of the token), got {} characters",
                    t.secret_sha256.len()
                )));
            };
            if t.scopes.is_empty() {
                return Err(ConfigError(format!(
                    "{at}.scopes: name at least one scope prefix (e.g. \"project/acme\")"
                )));
            }
            let prefixes = t
                .scopes
                .iter()
                .map(|s| Scope::parse(s).map_err(|e| ConfigError(format!("{at}.scopes: {e}"))))
                .collect::<Result<Arc<[_]>, _>>()?;
            if t.rate_limit_per_minute == Some(0) {
                return Err(ConfigError(format!(
                    "{at}.rate_limit_per_minute: must be at least 1 (leave it out for no limit)"
                )));
            }
            let entry = Entry {
                grant: Grant {
                    name: Some(t.name.as_str().into()),
                    prefixes: Some(prefixes),
                    access: t.access,
                },
                expires_at: t.expires_at,
                rate_limit_per_minute: t.rate_limit_per_minute,
            };
            if by_hash.insert(h, entry).is_some() {
                return Err(ConfigError(format!(
                    "{at}.secret_sha256: the same secret is configured twice"
                )));
            }
        }
        Ok(Tokens { by_hash })
    }

    /// The entry of a presented token, if it is configured. The lookup is
    /// by the token's SHA-256, so timing reveals nothing usable about
    /// secrets.
    pub fn entry(&self, token: &str) -> Option<&Entry> {
        self.by_hash.get(&Tokens::digest(token))
    }

    /// The SHA-256 a token is filed under: what a holder of a token (the
    /// inspector's sessions) keeps instead of the secret.
    pub fn digest(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
    }

    /// The entry filed under `digest`, if it is configured now.
    pub fn entry_by_digest(&self, digest: &[u8; 32]) -> Option<&Entry> {
        self.by_hash.get(digest)
    }

    /// The grant of a presented token, if it is configured (expired or
    /// not: see [`Tokens::entry`]).
    pub fn grant(&self, token: &str) -> Option<&Grant> {
        self.entry(token).map(|e| &e.grant)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// The tokens a server accepts now: read by every request, replaced whole
/// by a reload (`SIGHUP`, or a change to the configuration file).
#[derive(Debug)]
pub struct TokenTable(RwLock<Arc<Tokens>>);

impl TokenTable {
    /// A table holding `tokens`.
    pub fn new(tokens: Tokens) -> TokenTable {
        TokenTable(RwLock::new(Arc::new(tokens)))
    }

    /// The tokens now.
    pub fn current(&self) -> Arc<Tokens> {
        // A writer only swaps an `Arc`: it cannot panic half-way.
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the tokens; requests from now on see the new ones.
    pub fn replace(&self, tokens: Tokens) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tokens);
    }
}

/// The 32 bytes of 64 hex digits (either case); `None` for anything else.
fn digest_of_hex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        *o = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// Hex SHA-256 of a token, as `secret_sha256` holds it.
pub fn sha256_hex(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut s = String::with_capacity(64);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A fresh token: `strata_` and 64 hex digits from two random UUIDv4s (244
/// random bits from the operating system's generator).
pub fn new_token() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("strata_{a}{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(prefixes: &[&str]) -> Grant {
        Grant {
            name: Some("t".into()),
            prefixes: Some(prefixes.iter().map(|p| Scope::parse(p).unwrap()).collect()),
            access: Access::Read,
        }
    }

    #[test]
    fn prefixes_cover_the_scope_and_below_only() {
        let g = grant(&["project/acme"]);
        for ok in ["project/acme", "project/acme/sprint/s1"] {
            assert!(g.allows_scope(&Scope::parse(ok).unwrap()), "{ok}");
        }
        for no in ["project/acmex", "project", "global", "project/other"] {
            assert!(!g.allows_scope(&Scope::parse(no).unwrap()), "{no}");
        }
        let v = View::parse(&["project/acme/**", "global"]).unwrap();
        assert_eq!(g.first_outside(&v).unwrap().to_string(), "global");
        let v = View::parse(&["project/**"]).unwrap();
        assert!(g.first_outside(&v).is_some());
    }

    #[test]
    fn tokens_resolve_by_hash() {
        let t = new_token();
        assert_eq!(t.len(), 7 + 64);
        let tokens = Tokens::from_config(&[TokenConfig {
            name: "a".into(),
            secret_sha256: sha256_hex(&t),
            scopes: vec!["global".into()],
            access: Access::ReadWrite,
            ..Default::default()
        }])
        .unwrap();
        assert!(tokens.grant(&t).is_some());
        assert!(tokens.grant("strata_nope").is_none());
    }

    #[test]
    fn secrets_are_64_hex_digits_in_either_case() {
        let t = new_token();
        let config = |secret: String| {
            Tokens::from_config(&[TokenConfig {
                name: "a".into(),
                secret_sha256: secret,
                scopes: vec!["global".into()],
                access: Access::Read,
                ..Default::default()
            }])
        };
        let upper = config(sha256_hex(&t).to_ascii_uppercase()).unwrap();
        assert!(upper.grant(&t).is_some());
        let hex = sha256_hex(&t);
        for bad in [
            hex[..63].to_string(),
            format!("{hex}0"),
            format!("{}g", &hex[..63]),
            format!("{}é", &hex[..62]),
            String::new(),
        ] {
            let e = config(bad.clone()).unwrap_err().to_string();
            assert!(
                e.contains("secret_sha256") && e.contains("64 hex digits"),
                "{bad}: {e}"
            );
        }
    }
}
