//! Connecting to the store and keeping its schema current.
//!
//! SQLite is the embedded default (`sqlite://brainstem.db`, created on first
//! use, WAL mode); PostgreSQL is chosen by a `postgres://` URL.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use brainstem_migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DbBackend,
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
};

use crate::{Error, Result};

/// Which kind of database a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn of_url(url: &str) -> Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(Error::validation(
                "database URL must start with sqlite: or postgres://",
            ))
        }
    }

    pub fn of(db: &DatabaseConnection) -> Self {
        match db.get_database_backend() {
            DbBackend::Postgres => Self::Postgres,
            _ => Self::Sqlite,
        }
    }
}

/// Open a connection pool. SQLite files are created when missing.
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection> {
    let backend = Backend::of_url(url)?;
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(30))
        .sqlx_logging(false);
    if backend == Backend::Sqlite {
        options.map_sqlx_sqlite_opts(|opts| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
        });
    }
    Database::connect(options)
        .await
        .map_err(|err| Error::Internal(format!("cannot connect to the database: {err}")))
}

/// Apply every pending migration.
pub async fn migrate(db: &DatabaseConnection) -> Result<()> {
    Migrator::up(db, None)
        .await
        .map_err(|err| Error::Internal(format!("migration failed: {err}")))
}

/// Names of all migrations this build knows, oldest first.
pub fn migration_names() -> Vec<String> {
    Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect()
}

/// Counts the SQL statements a connection pool sends, in and out of
/// transactions. Exported as `brainstem_db_statements_total`; it is how a
/// test sees that batching keeps a list's statements flat.
#[derive(Clone, Debug, Default)]
pub struct StatementCounter(Arc<AtomicU64>);

impl StatementCounter {
    /// Count every statement of `db` and of the clones made of it from now
    /// on (attach before the pool is shared).
    pub fn attach(&self, db: &mut DatabaseConnection) {
        let count = self.0.clone();
        db.set_metric_callback(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Statements sent so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
