//! The domain's one error type. `brainstem-api` maps each variant to a
//! GraphQL error code in a single place; `Internal` causes are logged there
//! and never shown to clients.

use sea_orm::{DbErr, SqlErr};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No credential, or one that is malformed, expired, revoked or unknown.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller is known but may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The thing does not exist *for this caller*: other tenants' rows are
    /// reported the same way as rows that do not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The input is malformed or breaks a rule; the message says which.
    #[error("{0}")]
    Validation(String),
    /// The input clashes with existing state (a duplicate, a lost race).
    #[error("{0}")]
    Conflict(String),
    /// The thing exists but is not in a state that allows this.
    #[error("{0}")]
    InvalidTransition(String),
    /// Too many requests; try again after the given number of seconds.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_secs: u64,
    },
    /// The store could not take the work now (it waited its turn past its
    /// limit, or a deadlock or serialization failure rolled it back):
    /// nothing was written, and the same request may succeed if retried
    /// after a moment. The text is for logs only.
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    /// A bug or an unavailable dependency. The text is for logs only.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::NotFound(what.into())
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Self::Validation(message.into())
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::Forbidden(message.into())
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::Internal(cause.to_string())
    }

    /// The error as stored with what it refused (a failed import line):
    /// a stable name of its kind and its text; [`Error::stored`] gives it
    /// back. A rate limit is stored as a conflict (its wait is long past
    /// when it is read).
    pub fn to_stored(&self) -> (&'static str, String) {
        match self {
            Self::Unauthenticated(m) => ("unauthenticated", m.clone()),
            Self::Forbidden(m) => ("forbidden", m.clone()),
            Self::NotFound(m) => ("not_found", m.clone()),
            Self::Validation(m) => ("validation", m.clone()),
            Self::Conflict(m) | Self::RateLimited { message: m, .. } => ("conflict", m.clone()),
            Self::InvalidTransition(m) => ("invalid_transition", m.clone()),
            Self::Unavailable(m) => ("unavailable", m.clone()),
            Self::Internal(m) => ("internal", m.clone()),
        }
    }

    /// An error as [`Error::to_stored`] stored it; an unknown kind is
    /// internal.
    pub fn stored(kind: &str, text: String) -> Self {
        match kind {
            "unauthenticated" => Self::Unauthenticated(text),
            "forbidden" => Self::Forbidden(text),
            "not_found" => Self::NotFound(text),
            "validation" => Self::Validation(text),
            "conflict" => Self::Conflict(text),
            "invalid_transition" => Self::InvalidTransition(text),
            "unavailable" => Self::Unavailable(text),
            _ => Self::Internal(text),
        }
    }
}

/// Database errors become domain errors here and only here: a unique
/// violation is a conflict, a foreign-key violation a validation error,
/// contention (see [`crate::db::is_contention`]) unavailable, anything else
/// internal.
impl From<DbErr> for Error {
    fn from(err: DbErr) -> Self {
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(detail)) => {
                Error::Conflict(format!("already exists ({detail})"))
            }
            Some(SqlErr::ForeignKeyConstraintViolation(detail)) => Error::Validation(format!(
                "refers to something that does not exist ({detail})"
            )),
            _ if crate::kernel::db::is_contention(&err) => Error::Unavailable(err.to_string()),
            _ => Error::Internal(err.to_string()),
        }
    }
}
