//! The engine's error type.
//!
//! Every variant names what was wrong (the field, the value, the bound) so that
//! a CLI, HTTP or MCP front end can show it to a person unchanged. Nothing here
//! knows about exit codes or status codes; front ends map [`Error::class`].

use std::fmt;

/// What a failed operation was about, so front ends can map errors to exit
/// codes or HTTP statuses without matching every variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The caller's input was malformed or out of range.
    Invalid,
    /// The named memory, session or scope does not exist.
    NotFound,
    /// An optimistic-concurrency check or uniqueness rule failed.
    Conflict,
    /// The operation needs an explicit confirmation.
    NeedsConfirmation,
    /// A bound (item size, the ephemeral sessions' bytes) would be
    /// exceeded.
    LimitExceeded,
    /// A session's byte bound (`max_bytes`) would be exceeded: archive it
    /// and start another, or raise its bound.
    SessionFull,
    /// The disk (or the database server's) is full: nothing was written;
    /// retry once space is freed.
    DiskFull,
    /// The input is well formed but a rule refuses it (a secret in a
    /// scope whose `[[secrets]]` rule says `refuse`).
    Refused,
    /// The storage layer failed.
    Storage,
    /// The storage backend cannot be reached now (a database server that is
    /// down, restarting or out of connections): retry later. The request
    /// may not have been carried out; nothing was acknowledged.
    Unavailable,
}

impl ErrorClass {
    /// The class's code, the same word in the CLI's `--json` errors, HTTP
    /// error bodies and MCP tool errors.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Invalid => "invalid",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
            ErrorClass::NeedsConfirmation => "needs_confirmation",
            ErrorClass::LimitExceeded => "too_large",
            ErrorClass::SessionFull => "session_full",
            ErrorClass::DiskFull => "disk_full",
            ErrorClass::Refused => "refused",
            ErrorClass::Storage => "storage",
            ErrorClass::Unavailable => "unavailable",
        }
    }
}

/// An error from the strata engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A scope path is malformed.
    #[error("scope `{scope}`: {reason}")]
    InvalidScope {
        /// The offending scope text.
        scope: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A field of a memory (or of a request) has an invalid value.
    #[error("{field}: {reason}")]
    InvalidField {
        /// The field, e.g. `importance` or `payload`.
        field: String,
        /// Why the value was rejected.
        reason: String,
    },
    /// A filter could not be parsed or type-checked.
    #[error("filter: {0}")]
    InvalidFilter(String),
    /// The configuration is invalid.
    #[error("config: {0}")]
    InvalidConfig(String),
    /// A line of a JSONL import is malformed; nothing was imported.
    #[error("import line {line}: {reason}")]
    InvalidImport {
        /// 1-based line number.
        line: usize,
        /// What was wrong with it.
        reason: String,
    },
    /// No memory with this id exists.
    #[error("memory `{0}` not found")]
    NotFound(String),
    /// No session with this id exists.
    #[error("session `{0}` not found")]
    SessionNotFound(String),
    /// No context package with this id was logged.
    #[error(
        "context package `{0}` was never logged (log it with `log: true`, or the CLI's default)"
    )]
    PackageNotFound(String),
    /// An update named a version that is no longer current.
    #[error("memory `{id}`: version conflict (expected {expected}, current {current})")]
    VersionConflict {
        /// The memory id.
        id: String,
        /// The version the caller expected.
        expected: u64,
        /// The version stored now.
        current: u64,
    },
    /// A memory with this id already exists.
    #[error("memory `{0}` already exists")]
    DuplicateId(String),
    /// An active memory already holds this (scope, key).
    #[error("scope `{scope}` already has an active memory with key `{key}`")]
    KeyConflict {
        /// The scope.
        scope: String,
        /// The key.
        key: String,
    },
    /// A session with this id already exists.
    #[error("session `{0}` already exists")]
    DuplicateSession(String),
    /// The session was archived and takes no more writes.
    #[error("session `{0}` is archived and takes no more writes")]
    SessionArchived(String),
    /// The write would take a session over its size bound.
    #[error(
        "session `{session}` is full: {used} + {adding} bytes would exceed its bound of {bound} bytes; \
         archive it (`strata session archive {session}`) and start a new session, or raise the bound"
    )]
    SessionFull {
        /// The session id.
        session: String,
        /// Bytes already stored.
        used: u64,
        /// Bytes this write adds.
        adding: u64,
        /// The bound.
        bound: u64,
    },
    /// The ephemeral sessions of this process would hold more than their
    /// bound (`hot.ephemeral_bytes`).
    #[error(
        "ephemeral sessions hold {held} bytes in this process; {adding} more would exceed \
         `hot.ephemeral_bytes` ({bound} bytes): end some (archive them) or raise the bound"
    )]
    EphemeralFull {
        /// Bytes the ephemeral sessions hold.
        held: u64,
        /// Bytes this write adds.
        adding: u64,
        /// The bound.
        bound: u64,
    },
    /// The disk the store writes to (or the database server's) is full;
    /// nothing was written. The backend's error is the source.
    #[error("{backend}: the disk is full, nothing was written: {source}")]
    DiskFull {
        /// The backend (`sqlite`, `postgres`, `cold tier`).
        backend: &'static str,
        /// The backend's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An item is larger than the configured maximum.
    #[error("content is {size} bytes, over the limit of {limit} bytes (`max_item_bytes`)")]
    ItemTooLarge {
        /// Bytes in the item.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The operation is high-risk and needs explicit confirmation.
    #[error(
        "{0} needs confirmation: say yes to it (`--yes` on the command line, `\"confirm\": true` over HTTP and MCP)"
    )]
    NeedsConfirmation(String),
    /// A detector found a secret or personal data that the `[[secrets]]`
    /// rule for the memory's scope refuses; nothing was written.
    #[error(
        "{field}: bytes {start}..{end} look like {what} (detector `{detector}`); the [[secrets]] rule \
         for `{rule}` refuses it: remove it, or write it where a rule redacts or flags it",
        what = crate::secrets::describe(detector)
    )]
    Refused {
        /// The field (`content`, `payload.env[1]`; prefixed by the item or
        /// line for batches and imports).
        field: String,
        /// The detector's name.
        detector: String,
        /// First byte of the span in that field.
        start: usize,
        /// One past its last byte.
        end: usize,
        /// The scope of the rule that refused it (`*` for every scope).
        rule: String,
    },
    /// The database was written by a newer strata.
    #[error(
        "database schema version {found} is newer than this strata supports ({supported}); upgrade strata"
    )]
    SchemaTooNew {
        /// The version found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The file is another application's database: strata changes nothing
    /// in it.
    #[error(
        "{path} is not a strata database (it holds other tables: {tables}); strata opens only its own files or new ones"
    )]
    ForeignDatabase {
        /// The file.
        path: String,
        /// Some of the tables found.
        tables: String,
    },
    /// The storage backend failed; its own error is the source.
    #[error("{backend}: {source}")]
    Storage {
        /// The backend (`sqlite`, …).
        backend: &'static str,
        /// The backend's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The storage backend cannot be reached now (a database server that
    /// is down, restarting, or has no connection free); its own error is
    /// the source.
    #[error("{backend} is unavailable, retry later: {source}")]
    Unavailable {
        /// The backend (`postgres`).
        backend: &'static str,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored value cannot be read back (a damaged or hand-edited file):
    /// never read as a default.
    #[error("corrupt data: {what}: {source}")]
    Corrupt {
        /// Where.
        what: String,
        /// Why it cannot be read.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The embedder failed (model files, endpoint, or a vector of the
    /// wrong model or length).
    #[error("embedding: {0}")]
    Embedding(String),
    /// The tokenizer could not be loaded.
    #[error("tokenizer `{name}`: {reason}")]
    Tokenizer {
        /// The configured tokenizer name.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

impl Error {
    /// Whether this is a write refused inside [`crate::without_waiting`]:
    /// seen only by the code inside, whose result the caller drops (it gets
    /// [`crate::Refused`]), so nothing to log or report.
    pub fn is_write_refusal(&self) -> bool {
        matches!(self, Error::Unavailable { source, .. }
            if source.is::<crate::store::hurry::WriteRefused>())
    }

    /// The broad class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidScope { .. }
            | Error::InvalidField { .. }
            | Error::InvalidFilter(_)
            | Error::InvalidConfig(_)
            | Error::InvalidImport { .. }
            | Error::Tokenizer { .. } => ErrorClass::Invalid,
            Error::NotFound(_) | Error::SessionNotFound(_) | Error::PackageNotFound(_) => {
                ErrorClass::NotFound
            }
            Error::VersionConflict { .. }
            | Error::DuplicateId(_)
            | Error::KeyConflict { .. }
            | Error::DuplicateSession(_)
            | Error::SessionArchived(_) => ErrorClass::Conflict,
            Error::NeedsConfirmation(_) => ErrorClass::NeedsConfirmation,
            Error::Refused { .. } => ErrorClass::Refused,
            Error::SessionFull { .. } => ErrorClass::SessionFull,
            Error::ItemTooLarge { .. } | Error::EphemeralFull { .. } => ErrorClass::LimitExceeded,
            Error::DiskFull { .. } => ErrorClass::DiskFull,
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                ErrorClass::DiskFull
            }
            Error::SchemaTooNew { .. }
            | Error::ForeignDatabase { .. }
            | Error::Storage { .. }
            | Error::Corrupt { .. }
            | Error::Io { .. }
            | Error::Embedding(_) => ErrorClass::Storage,
            Error::Unavailable { .. } => ErrorClass::Unavailable,
        }
    }

    pub(crate) fn field(field: impl Into<String>, reason: impl fmt::Display) -> Error {
        Error::InvalidField {
            field: field.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
