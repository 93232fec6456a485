//! Transactions that write, and the turn a writer waits for.
//!
//! Every transaction that writes begins with [`BeginWrite::begin_write`].
//!
//! **SQLite** has one writer at a time. A transaction begins `IMMEDIATE`:
//! it takes the write lock before its first statement. Its default,
//! `DEFERRED`, takes the lock at the first write; a transaction that read
//! first then fails at once with `database is locked` (no busy handler
//! runs) whenever another writer committed since it read, which many
//! concurrent writers make likely. And the writers of this process queue
//! for one turn, in the order they asked ([`WriteTransaction`] holds it
//! until it commits or rolls back): SQLite's own busy handler polls with
//! sleeps of up to 100 ms, so under many writers (hundreds of executor
//! slots committing steps) a writer that kept losing the race waited
//! hundreds of milliseconds while later ones passed. Other processes on
//! the same file still meet the lock under the busy timeout.
//!
//! **PostgreSQL** begins as usual; its writers do not wait for each other
//! unless they touch the same rows.
//!
//! A writer that cannot have its turn or its `BEGIN` within [`WRITE_WAIT`]
//! (the timeout passed, no pooled connection in time) gets a contention
//! error, which [`crate::Error`] turns into `Unavailable`: callers may
//! retry, and nothing was written.
//!
//! Invariant: a task holding a [`WriteTransaction`] never begins another
//! write on the same database (it would wait for its own turn; the wait is
//! bounded by [`WRITE_WAIT`], as SQLite's lock was).

use std::{
    collections::HashMap,
    ops::Deref,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use sea_orm::{
    ConnAcquireErr, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    ExecResult, QueryResult, SqliteTransactionMode, Statement, TransactionOptions,
    TransactionTrait,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::db::is_contention;

/// How long a writer waits for its turn in all, over several busy
/// timeouts, before its write is refused as unavailable.
pub const WRITE_WAIT: Duration = Duration::from_secs(30);

/// Beginning a transaction that writes (see the module's header).
pub trait BeginWrite {
    fn begin_write(
        &self,
    ) -> impl Future<Output = std::result::Result<WriteTransaction, DbErr>> + Send;
}

impl BeginWrite for DatabaseConnection {
    async fn begin_write(&self) -> std::result::Result<WriteTransaction, DbErr> {
        let started = tokio::time::Instant::now();
        let turn = match self.get_database_backend() {
            DbBackend::Sqlite => {
                let turn = write_turn(self).acquire_owned();
                match tokio::time::timeout(WRITE_WAIT, turn).await {
                    Ok(Ok(permit)) => Some(permit),
                    // The semaphore is never closed; a timeout is contention.
                    Ok(Err(_)) | Err(_) => {
                        return Err(DbErr::ConnectionAcquire(ConnAcquireErr::Timeout));
                    }
                }
            }
            _ => None,
        };
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        // Another process may hold SQLite's lock past the busy timeout.
        // Nothing has happened before the `BEGIN` succeeds, so it is tried
        // again, for up to `WRITE_WAIT` in all.
        loop {
            match self.begin_with_options(options).await {
                Err(err) if is_contention(&err) && started.elapsed() < WRITE_WAIT => {
                    tracing::debug!(%err, "waiting for the write lock");
                }
                Ok(txn) => return Ok(WriteTransaction { txn, _turn: turn }),
                Err(err) => return Err(err),
            }
        }
    }
}

/// This process's one turn to write to the SQLite database `db`.
fn write_turn(db: &DatabaseConnection) -> Arc<Semaphore> {
    static TURNS: OnceLock<Mutex<HashMap<PathBuf, Arc<Semaphore>>>> = OnceLock::new();
    let file = db
        .get_sqlite_connection_pool()
        .connect_options()
        .get_filename()
        .to_path_buf();
    let mut turns = TURNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    turns
        .entry(file)
        .or_insert_with(|| Arc::new(Semaphore::new(1)))
        .clone()
}

/// A transaction that writes: on SQLite it holds this process's turn to
/// write until it commits, rolls back or is dropped.
pub struct WriteTransaction {
    txn: DatabaseTransaction,
    _turn: Option<OwnedSemaphorePermit>,
}

impl WriteTransaction {
    pub async fn commit(self) -> std::result::Result<(), DbErr> {
        self.txn.commit().await
    }

    pub async fn rollback(self) -> std::result::Result<(), DbErr> {
        self.txn.rollback().await
    }
}

impl Deref for WriteTransaction {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTransaction {
    fn get_database_backend(&self) -> DbBackend {
        self.txn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> std::result::Result<ExecResult, DbErr> {
        self.txn.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> std::result::Result<ExecResult, DbErr> {
        self.txn.execute_unprepared(sql).await
    }

    async fn query_one_raw(
        &self,
        stmt: Statement,
    ) -> std::result::Result<Option<QueryResult>, DbErr> {
        self.txn.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> std::result::Result<Vec<QueryResult>, DbErr> {
        self.txn.query_all_raw(stmt).await
    }

    fn support_returning(&self) -> bool {
        self.txn.support_returning()
    }

    fn is_mock_connection(&self) -> bool {
        self.txn.is_mock_connection()
    }
}
