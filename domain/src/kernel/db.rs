//! Connecting to the store and keeping its schema current.
//!
//! SQLite is the embedded default (`sqlite://brainstem.db`, created on first
//! use, WAL mode, readable by its owner only: [`super::db_files`]);
//! PostgreSQL is chosen by a `postgres://` URL.
//!
//! Writers wait their turn: every transaction that writes begins with
//! [`BeginWrite::begin_write`] (`db_write`: on SQLite, one writer of the
//! process at a time, in order, holding the write lock from `BEGIN`). A
//! write that still cannot happen (no turn or pooled connection in time, a
//! PostgreSQL deadlock or serialization failure) is [`Error::Unavailable`],
//! which callers may retry, never an internal error.

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use brainstem_migration::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr, Statement,
    sqlx::{
        Connection,
        sqlite::{SqliteJournalMode, SqliteSynchronous},
    },
};

pub use super::db_write::{BeginWrite, WRITE_WAIT, WriteTransaction};

use crate::{
    Error, Result,
    kernel::row_security::{self, Bypass},
};

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

/// Take the PostgreSQL advisory lock `name` for the rest of `txn`, without
/// waiting: whether it was taken (another process holds it otherwise).
/// Always true on SQLite, whose one process has nobody to exclude.
pub async fn try_xact_lock(txn: &impl ConnectionTrait, name: &str) -> Result<bool> {
    if txn.get_database_backend() != DbBackend::Postgres {
        return Ok(true);
    }
    let row = txn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "SELECT pg_try_advisory_xact_lock(hashtext($1)) AS locked",
            [name.into()],
        ))
        .await?;
    let locked = row.map(|r| r.try_get::<bool>("", "locked")).transpose()?;
    Ok(locked == Some(true))
}

/// An error of a statement run on a raw pooled connection (not through
/// SeaORM), as SeaORM would have reported it.
pub fn sqlx_error(err: sea_orm::sqlx::Error) -> Error {
    Error::from(DbErr::Conn(sea_orm::RuntimeErr::SqlxError(err.into())))
}

/// How long one SQLite statement waits for a lock (its busy timeout).
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `err` says the store could not take the work now, for a reason
/// that passes: SQLite busy or locked past the busy timeout, a PostgreSQL
/// serialization failure (`40001`) or deadlock (`40P01`), or no pooled
/// connection within the acquire timeout. The work was rolled back whole.
pub fn is_contention(err: &DbErr) -> bool {
    use sea_orm::{ConnAcquireErr, RuntimeErr, sqlx};
    let sqlx_err = match err {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => return true,
        DbErr::Conn(RuntimeErr::SqlxError(e))
        | DbErr::Exec(RuntimeErr::SqlxError(e))
        | DbErr::Query(RuntimeErr::SqlxError(e)) => e,
        _ => return false,
    };
    match &**sqlx_err {
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // Primary codes SQLITE_BUSY (5) and SQLITE_LOCKED (6), with
                // their extended codes (BUSY_SNAPSHOT, BUSY_TIMEOUT, …).
                code.parse::<i32>()
                    .is_ok_and(|code| matches!(code & 0xff, 5 | 6))
            } else {
                matches!(&*code, "40001" | "40P01")
            }
        }
        _ => false,
    }
}

/// Open a connection pool. SQLite files are created when missing.
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(30));
    open(url, options).await
}

/// A pool on a read replica (`database_read_urls`): connected when first
/// used, so a replica that is down at start-up only starts out of the
/// rotation (`replicas`), and quick to give up on one that stops.
pub async fn connect_replica(url: &str, max_connections: u32) -> Result<DatabaseConnection> {
    if Backend::of_url(url)? != Backend::Postgres {
        return Err(Error::validation(
            "a read replica must be a postgres:// URL",
        ));
    }
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections)
        .min_connections(0)
        .connect_lazy(true)
        .connect_timeout(REPLICA_TIMEOUT)
        .acquire_timeout(REPLICA_TIMEOUT);
    open(url, options).await
}

/// How long a read replica may take to hand out a connection.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(2);

async fn open(url: &str, mut options: ConnectOptions) -> Result<DatabaseConnection> {
    let backend = Backend::of_url(url)?;
    options.sqlx_logging(false);
    if backend == Backend::Sqlite {
        // It holds secrets: created, or kept, readable by its owner only.
        super::db_files::make_private(url)?;
        options.map_sqlx_sqlite_opts(|opts| {
            opts.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .foreign_keys(true)
        });
    }
    if backend == Backend::Postgres {
        // Each connection carries the row access of the work that takes it
        // (`row_security`); writing it also proves the connection alive, so
        // it replaces the pool's liveness ping. For a role that row-level
        // security does not bind (a superuser, `BYPASSRLS`) nothing reads
        // the setting: the pool pings instead of writing it.
        let binds = Arc::new(AtomicBool::new(true));
        options
            .test_before_acquire(false)
            .map_sqlx_postgres_pool_opts(move |pool| {
                let on_connect = binds.clone();
                let on_acquire = binds.clone();
                pool.after_connect(move |conn, _| {
                    let binds = on_connect.clone();
                    Box::pin(async move {
                        let bound = row_security::set_on_connect(conn).await?;
                        binds.store(bound, Ordering::Relaxed);
                        Ok(())
                    })
                })
                .before_acquire(move |conn, _| {
                    let bound = on_acquire.load(Ordering::Relaxed);
                    Box::pin(async move {
                        if bound {
                            row_security::set_on_acquire(conn).await?;
                        } else {
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
            });
    }
    Database::connect(options)
        .await
        .map_err(|err| Error::Internal(format!("cannot connect to the database: {err}")))
}

/// Apply every pending migration.
pub async fn migrate(db: &DatabaseConnection) -> Result<()> {
    row_security::as_platform(Bypass::Migration, Migrator::up(db, None))
        .await
        .map_err(|err| Error::Internal(format!("migration failed: {err}")))
}

/// What a PostgreSQL superuser runs once in Brainstem's database before
/// the server, connecting as a role that is no superuser, migrates it:
/// pgvector, and `@@` (`ts_match_vq`) marked leakproof, without which
/// row-level security keeps the full-text index of memories from being
/// used (PostgreSQL uses an index under row security only for leakproof
/// operators; `ts_match_vq` reads its two arguments and raises no error
/// that depends on a row's content).
pub const SUPERUSER_SETUP: &str = "CREATE EXTENSION IF NOT EXISTS vector; \
     ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF";

/// On PostgreSQL, whether memory search can use its full-text index under
/// row-level security (see [`SUPERUSER_SETUP`]); `true` on SQLite.
pub async fn keyword_index_usable(db: &DatabaseConnection) -> Result<bool> {
    if Backend::of(db) != Backend::Postgres {
        return Ok(true);
    }
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT proleakproof AS leakproof FROM pg_proc \
             WHERE oid = 'pg_catalog.ts_match_vq(tsvector, tsquery)'::regprocedure",
        ))
        .await?;
    Ok(row
        .map(|r| r.try_get::<bool>("", "leakproof"))
        .transpose()?
        .unwrap_or(false))
}

/// On PostgreSQL, the server's role when row-level security does not bind
/// it (a superuser or a role with `BYPASSRLS`); `None` when it does, or on
/// SQLite.
pub async fn role_skipping_row_security(db: &DatabaseConnection) -> Result<Option<String>> {
    if Backend::of(db) != Backend::Postgres {
        return Ok(None);
    }
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_user::text AS role, rolsuper OR rolbypassrls AS skips \
             FROM pg_roles WHERE rolname = current_user",
        ))
        .await?;
    let Some(row) = row else { return Ok(None) };
    let skips: bool = row.try_get("", "skips")?;
    Ok(skips
        .then(|| row.try_get::<String>("", "role"))
        .transpose()?)
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
/// test sees that batching keeps a list's statements flat. One observer may
/// also be handed each statement's SQL, in the task that sent it (the
/// tenancy check that reads queries, `tests/e2e/statements.rs`).
#[derive(Clone, Default)]
pub struct StatementCounter {
    count: Arc<AtomicU64>,
    observer: Arc<OnceLock<StatementObserver>>,
}

/// Called with the SQL of every statement sent.
pub type StatementObserver = Arc<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for StatementCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatementCounter")
            .field("count", &self.get())
            .field("observed", &self.observer.get().is_some())
            .finish()
    }
}

impl StatementCounter {
    /// Count every statement of `db` and of the clones made of it from now
    /// on (attach before the pool is shared).
    pub fn attach(&self, db: &mut DatabaseConnection) {
        let count = self.count.clone();
        let observer = self.observer.clone();
        db.set_metric_callback(move |info| {
            count.fetch_add(1, Ordering::Relaxed);
            if let Some(observe) = observer.get() {
                observe(&info.statement.sql);
            }
        });
    }

    /// Hand every statement sent from now on to `observer`; there is one
    /// observer at most (`Err` with it back if one is set).
    pub fn observe(
        &self,
        observer: StatementObserver,
    ) -> std::result::Result<(), StatementObserver> {
        self.observer.set(observer)
    }

    /// Statements sent so far.
    pub fn get(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// For tests that read plans: a migrated SQLite database in a temporary
/// directory (kept while the directory lives), a migrated PostgreSQL
/// database of its own on `TEST_DATABASE_URL`'s server (which
/// `scripts/test` provisions), and the plan of a statement on each.
#[cfg(test)]
pub mod plans {
    use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};

    pub async fn migrated_postgres() -> DatabaseConnection {
        let base = std::env::var("TEST_DATABASE_URL").expect(
            "PostgreSQL tests need TEST_DATABASE_URL (a superuser URL); scripts/test provisions one",
        );
        let (server, _) = base.rsplit_once('/').unwrap();
        let name = format!("plan_{}", uuid::Uuid::now_v7().simple());
        let admin = super::connect(&base, 1).await.unwrap();
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let db = super::connect(&format!("{server}/{name}"), 1)
            .await
            .unwrap();
        db.execute_unprepared(super::SUPERUSER_SETUP).await.unwrap();
        super::migrate(&db).await.unwrap();
        db
    }

    /// PostgreSQL's `EXPLAIN` of `sql` with `values`, one line each, with
    /// sequential scans taken only where nothing else can answer (so the
    /// plan shows which index could serve each part, whatever the tables
    /// hold).
    pub async fn postgres_plan(
        db: &DatabaseConnection,
        sql: &str,
        values: Vec<sea_orm::Value>,
    ) -> Vec<String> {
        let txn = db.begin().await.unwrap();
        txn.execute_unprepared("SET LOCAL enable_seqscan = off")
            .await
            .unwrap();
        let rows = txn
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                format!("EXPLAIN {sql}"),
                values,
            ))
            .await
            .unwrap();
        txn.rollback().await.unwrap();
        rows.iter()
            .map(|row| row.try_get::<String>("", "QUERY PLAN").unwrap())
            .collect()
    }

    pub async fn migrated_sqlite() -> (tempfile::TempDir, DatabaseConnection) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("plan.db").display());
        let db = super::connect(&url, 1).await.unwrap();
        super::migrate(&db).await.unwrap();
        (dir, db)
    }

    /// Each step's `detail` of `EXPLAIN QUERY PLAN` for `statement`.
    pub async fn query_plan(db: &DatabaseConnection, mut statement: Statement) -> Vec<String> {
        statement.sql = format!("EXPLAIN QUERY PLAN {}", statement.sql);
        db.query_all_raw(statement)
            .await
            .unwrap()
            .iter()
            .map(|row| row.try_get::<String>("", "detail").unwrap())
            .collect()
    }
}
