//! Read replicas: PostgreSQL hot standbys that serve reads, chosen so that
//! a client reads its own writes.
//!
//! A position is a write-ahead log position of the primary ([`Lsn`], as
//! PostgreSQL prints it: `16/B374D848`). A write's response carries the
//! primary's position after it ([`Replicas::position`]); a read that names a
//! position is served by a replica that has replayed at least that far,
//! waiting up to `wait` for one, else by the primary ([`Replicas::choose`]).
//!
//! Health: [`Replicas::check`] (every `check_every`, from
//! [`Replicas::spawn_monitor`]) samples the primary's position and asks each
//! replica how far it has replayed. A replica's lag is how long ago the
//! primary was at the oldest position the replica has not replayed (zero
//! when it has replayed the latest sample). A replica that does not answer,
//! is not in recovery, or lags past `max_lag` leaves the rotation; it comes
//! back at the first check that finds it well. Lag and rotation are the
//! metrics `brainstem_replica_lag_seconds{replica}` and
//! `brainstem_replica_in_rotation{replica}` (the replica's position in
//! `database_read_urls`).
//!
//! Invariants:
//! - A read given a position never goes to a replica that has not replayed
//!   it: a replica's cached position only ever grows with what it answered,
//!   and a replica is chosen for a position only when that cached position
//!   reaches it.
//! - No replica, or none in time: the primary (`None`), never an error.

use std::{
    collections::VecDeque,
    fmt,
    str::FromStr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};

use crate::{Error, Result, kernel::metrics::metrics};

/// A write-ahead log position of the primary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl FromStr for Lsn {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::validation(format!(
                "a commit position looks like `16/B374D848`, not `{s}`"
            ))
        };
        let (high, low) = s.trim().split_once('/').ok_or_else(bad)?;
        let high = u64::from_str_radix(high, 16).map_err(|_| bad())?;
        let low = u64::from_str_radix(low, 16).map_err(|_| bad())?;
        if high > u64::from(u32::MAX) || low > u64::from(u32::MAX) {
            return Err(bad());
        }
        Ok(Self((high << 32) | low))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// How replicas are used.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaSettings {
    /// A replica lagging more than this leaves the rotation.
    pub max_lag: Duration,
    /// How long a read waits for a replica to replay its position before
    /// it goes to the primary.
    pub wait: Duration,
    /// How often the monitor checks the replicas.
    pub check_every: Duration,
}

/// Primary positions remembered for measuring lag.
const HISTORY: usize = 4096;
/// How long one replica may take to answer a check or a position poll.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);
/// Pause between polls of a replica that has not yet replayed a position.
const POLL_EVERY: Duration = Duration::from_millis(5);

struct Member {
    db: DatabaseConnection,
    label: String,
    state: Mutex<MemberState>,
}

#[derive(Clone, Copy, Debug, Default)]
struct MemberState {
    in_rotation: bool,
    replayed: Lsn,
}

/// The primary and its read replicas.
pub struct Replicas {
    primary: DatabaseConnection,
    members: Vec<Member>,
    next: AtomicUsize,
    settings: ReplicaSettings,
    /// The primary's positions as sampled, oldest first.
    history: Mutex<VecDeque<(Instant, Lsn)>>,
}

impl fmt::Debug for Replicas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicas")
            .field("replicas", &self.members.len())
            .field("settings", &self.settings)
            .finish()
    }
}

impl Replicas {
    /// Replicas over connections already made (see [`crate::db::connect_replica`]);
    /// each starts in the rotation, to be checked by the first
    /// [`Replicas::check`].
    pub fn new(
        primary: DatabaseConnection,
        replicas: Vec<DatabaseConnection>,
        settings: ReplicaSettings,
    ) -> Arc<Self> {
        let members = replicas
            .into_iter()
            .enumerate()
            .map(|(i, db)| Member {
                db,
                label: i.to_string(),
                state: Mutex::new(MemberState {
                    in_rotation: true,
                    replayed: Lsn::default(),
                }),
            })
            .collect();
        Arc::new(Self {
            primary,
            members,
            next: AtomicUsize::new(0),
            settings,
            history: Mutex::new(VecDeque::new()),
        })
    }

    /// The replicas' connections, in configuration order.
    pub fn connections(&self) -> impl Iterator<Item = &DatabaseConnection> {
        self.members.iter().map(|m| &m.db)
    }

    /// The primary's position now: a read given it sees every write
    /// committed before this call.
    pub async fn position(&self) -> Result<Lsn> {
        lsn_of(
            &self.primary,
            "SELECT pg_current_wal_insert_lsn()::text AS lsn",
        )
        .await?
        .ok_or_else(|| Error::Internal("the primary reported no WAL position".into()))
    }

    /// The replica (its index) to serve a read that must see `after`, or
    /// `None` for the primary: replicas take turns; one that has not
    /// replayed `after` is asked again until `wait` runs out.
    pub async fn choose(&self, after: Option<Lsn>) -> Option<usize> {
        let count = self.members.len();
        if count == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let order = (0..count).map(|k| (start + k) % count);
        let in_rotation: Vec<usize> = order
            .filter(|&i| self.state(i).is_some_and(|s| s.in_rotation))
            .collect();
        let Some(after) = after else {
            return in_rotation.first().copied();
        };
        if in_rotation.is_empty() {
            return None; // nothing to wait for
        }
        if let Some(&i) = in_rotation
            .iter()
            .find(|&&i| self.state(i).is_some_and(|s| s.replayed >= after))
        {
            return Some(i);
        }
        let deadline = Instant::now() + self.settings.wait;
        loop {
            for &i in &in_rotation {
                if self.poll(i).await.is_some_and(|replayed| replayed >= after) {
                    return Some(i);
                }
            }
            if Instant::now() + POLL_EVERY >= deadline {
                return None;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Check every replica once: its position, its lag, in or out of the
    /// rotation.
    pub async fn check(&self) {
        let now = Instant::now();
        match self.position().await {
            Ok(position) => {
                if let Ok(mut history) = self.history.lock() {
                    if history.len() >= HISTORY {
                        history.pop_front();
                    }
                    history.push_back((now, position));
                }
            }
            Err(err) => tracing::warn!(%err, "could not read the primary's WAL position"),
        }
        for i in 0..self.members.len() {
            let replayed = self.poll(i).await;
            let lag = replayed.map(|r| self.lag(r, now));
            let in_rotation = lag.is_some_and(|lag| lag <= self.settings.max_lag);
            let Some(member) = self.members.get(i) else {
                continue;
            };
            if let Ok(mut state) = member.state.lock() {
                if state.in_rotation != in_rotation {
                    tracing::warn!(
                        replica = %member.label,
                        in_rotation,
                        lag_seconds = lag.map(|l| l.as_secs_f64()),
                        "a read replica {} the rotation",
                        if in_rotation { "joined" } else { "left" }
                    );
                }
                state.in_rotation = in_rotation;
            }
            let labels = ReplicaLabels {
                replica: member.label.clone(),
            };
            let m = metrics();
            m.replica_in_rotation
                .get_or_create(&labels)
                .set(i64::from(in_rotation));
            if let Some(lag) = lag {
                m.replica_lag.get_or_create(&labels).set(lag.as_secs_f64());
            }
        }
    }

    /// Check the replicas every `check_every`, for as long as the process
    /// runs.
    pub fn spawn_monitor(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let replicas = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(replicas.settings.check_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                replicas.check().await;
            }
        })
    }

    fn state(&self, i: usize) -> Option<MemberState> {
        self.members.get(i)?.state.lock().ok().map(|s| *s)
    }

    /// Ask replica `i` how far it has replayed (and remember it); `None`
    /// when it does not answer in time or is not a standby.
    async fn poll(&self, i: usize) -> Option<Lsn> {
        let member = self.members.get(i)?;
        let asked = lsn_of(
            &member.db,
            "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END AS lsn",
        );
        let replayed = match tokio::time::timeout(ANSWER_WITHIN, asked).await {
            Ok(Ok(Some(replayed))) => replayed,
            Ok(Ok(None)) => return None,
            Ok(Err(err)) => {
                tracing::debug!(replica = %member.label, %err, "a read replica did not answer");
                return None;
            }
            Err(_) => return None,
        };
        if let Ok(mut state) = member.state.lock() {
            state.replayed = state.replayed.max(replayed);
        }
        Some(replayed)
    }

    /// How long ago the primary was at the oldest sampled position beyond
    /// `replayed` (zero if there is none).
    fn lag(&self, replayed: Lsn, now: Instant) -> Duration {
        let Ok(history) = self.history.lock() else {
            return Duration::ZERO;
        };
        history
            .iter()
            .find(|(_, position)| *position > replayed)
            .map(|(at, _)| now.saturating_duration_since(*at))
            .unwrap_or(Duration::ZERO)
    }
}

/// The label of a replica's metrics: its index in `database_read_urls`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReplicaLabels {
    pub replica: String,
}

async fn lsn_of(db: &DatabaseConnection, sql: &str) -> Result<Option<Lsn>> {
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await?;
    let text: Option<String> = match row {
        Some(row) => row.try_get("", "lsn")?,
        None => None,
    };
    text.map(|t| t.parse()).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_and_print_as_postgresql_writes_them() {
        let lsn: Lsn = "16/B374D848".parse().expect("a position");
        assert_eq!(lsn.0, (0x16 << 32) | 0xB374_D848);
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert!("0/3402630".parse::<Lsn>().expect("a position") < lsn);
        for bad in ["", "16", "16/", "/1", "x/1", "1/1/1", "100000000/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?} was accepted");
        }
    }
}
