//! Helpers for the crate's unit tests.

use jiff::Timestamp;

use crate::model::{Kind, Memory, Source, checksum};
use crate::scope::Scope;

/// A plain memory created at `at`.
pub fn memory(scope: &str, content: &str, at: Timestamp) -> Memory {
    Memory {
        id: uuid::Uuid::now_v7().to_string(),
        scope: Scope::parse(scope).unwrap(),
        kind: Kind::Context,
        role: None,
        content: content.into(),
        payload: None,
        key: None,
        tags: vec![],
        importance: 0.5,
        source: Source::External,
        session: None,
        created_at: at,
        updated_at: at,
        last_accessed_at: None,
        access_count: 0,
        expires_at: None,
        pinned: false,
        sensitive: false,
        tokens: 1,
        checksum: checksum(content, None),
        version: 1,
        embedding: None,
        provenance: None,
    }
}
