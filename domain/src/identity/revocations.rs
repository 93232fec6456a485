//! Revoked credentials, announced to every process, so that a connection
//! that checked a credential once (an open WebSocket) learns it no longer
//! holds.
//!
//! A revocation is announced twice: at once to this process's subscribers,
//! and, on PostgreSQL, with `pg_notify` on [`CHANNEL`] after the change
//! commits, which the event bus's listener in every process (see
//! `runtime::events`) hands to its own [`Revocations`]. A process that
//! hears its own announcement again gets a duplicate, which costs a
//! subscriber a second look at nothing.
//!
//! Invariants:
//! - An announcement leaves only after the change is committed, so a
//!   subscriber that looks again sees the credential revoked.
//! - When announcements may have been missed (the listener lost its
//!   connection, or a subscriber fell behind the bounded channel), the
//!   subscriber is told [`Revoked::Unknown`] and must re-check whatever it
//!   holds: nothing is silently lost.
//! - Subscribe before checking a credential, so that a revocation that
//!   commits after the check is always heard.

use brainstem_entity::ApiKeyId;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tokio::sync::broadcast;

/// The PostgreSQL notification channel of revocations.
pub const CHANNEL: &str = "brainstem_revocations";

/// Announcements buffered per process; a subscriber further behind is told
/// [`Revoked::Unknown`] (as a lag) and re-checks.
const CAPACITY: usize = 256;

/// What stopped being valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    ApiKey(ApiKeyId),
    /// Announcements may have been missed: every held credential must be
    /// checked again.
    Unknown,
}

impl Revoked {
    fn encode(self) -> String {
        match self {
            Revoked::ApiKey(id) => format!("api_key:{id}"),
            Revoked::Unknown => "unknown".to_owned(),
        }
    }

    /// A notification's payload; anything unreadable is [`Revoked::Unknown`],
    /// which errs on the side of checking again.
    pub fn decode(payload: &str) -> Self {
        payload
            .strip_prefix("api_key:")
            .and_then(|id| id.parse().ok())
            .map_or(Revoked::Unknown, Revoked::ApiKey)
    }
}

/// This process's revocation announcements. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Revocations {
    tx: broadcast::Sender<Revoked>,
}

impl Default for Revocations {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Revocations {
    /// Hear every announcement made from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Revoked> {
        self.tx.subscribe()
    }

    /// Tell this process's subscribers (no subscriber is fine).
    pub fn deliver(&self, revoked: Revoked) {
        let _ = self.tx.send(revoked);
    }

    /// Announce a committed revocation here and, on PostgreSQL, to every
    /// other process. A failed notification is logged, not returned: the
    /// revocation itself stands, and the other processes' connections still
    /// refuse every new operation of the credential (they check it per
    /// operation).
    pub async fn announce(&self, db: &DatabaseConnection, revoked: Revoked) {
        self.deliver(revoked);
        if db.get_database_backend() != DbBackend::Postgres {
            return;
        }
        let notify = Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_notify($1, $2)",
            [CHANNEL.into(), revoked.encode().into()],
        );
        if let Err(err) = db.execute_raw(notify).await {
            tracing::warn!(%err, "a revocation could not be announced to other processes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_read_back_and_garbage_means_check_again() {
        let id = ApiKeyId::new();
        assert_eq!(
            Revoked::decode(&Revoked::ApiKey(id).encode()),
            Revoked::ApiKey(id)
        );
        assert_eq!(Revoked::decode("unknown"), Revoked::Unknown);
        assert_eq!(Revoked::decode("api_key:nope"), Revoked::Unknown);
    }
}
