//! [`SessionLock`]: one process at a time for a long piece of background
//! work (a re-embedding pass, building vector indexes), on PostgreSQL a
//! session advisory lock held by a pooled connection of its own.
//!
//! Invariants:
//! - **No transaction is held.** The lock's connection sits idle outside
//!   any transaction while the work runs on other connections, so a pass of
//!   minutes keeps no snapshot open (vacuum is not held back) and is never
//!   cut by `idle_in_transaction_session_timeout`. (A transaction-scoped
//!   lock would do both.)
//! - **Never left behind.** [`SessionLock::release`] unlocks and returns the
//!   connection to the pool. A lock dropped without it (an error, a future
//!   cancelled at shutdown) closes its connection instead, and PostgreSQL
//!   releases a closed session's locks: a pooled connection never goes back
//!   to the pool still holding one.
//! - SQLite has one process and nobody to exclude: the lock is always
//!   taken and holds nothing.

use sea_orm::{
    DatabaseConnection, DbBackend,
    sqlx::{self, Postgres, pool::PoolConnection},
};

use crate::{Result, kernel::db::sqlx_error};

/// A named lock taken with [`SessionLock::try_take`].
pub struct SessionLock {
    /// The connection holding the lock (PostgreSQL), until released.
    conn: Option<PoolConnection<Postgres>>,
    name: &'static str,
}

impl SessionLock {
    /// Take the lock `name` without waiting: `None` when another session
    /// holds it.
    pub async fn try_take(db: &DatabaseConnection, name: &'static str) -> Result<Option<Self>> {
        if db.get_database_backend() != DbBackend::Postgres {
            return Ok(Some(Self { conn: None, name }));
        }
        let mut conn = db
            .get_postgres_connection_pool()
            .acquire()
            .await
            .map_err(sqlx_error)?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
            .bind(name)
            .fetch_one(&mut *conn)
            .await
            .map_err(sqlx_error)?;
        Ok(locked.then_some(Self {
            conn: Some(conn),
            name,
        }))
    }

    /// The connection holding the lock, for work that must run on it
    /// (none on SQLite). Leave it outside a transaction.
    pub fn connection(&mut self) -> Option<&mut sqlx::PgConnection> {
        self.conn.as_deref_mut()
    }

    /// Unlock, and give the connection back to the pool.
    pub async fn release(mut self) -> Result<()> {
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        let unlocked = sqlx::query("SELECT pg_advisory_unlock(hashtext($1))")
            .bind(self.name)
            .execute(&mut *conn)
            .await;
        match unlocked {
            Ok(_) => Ok(()),
            Err(err) => {
                // Closing the connection releases the lock.
                drop(conn.detach());
                Err(sqlx_error(err))
            }
        }
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            tracing::warn!(
                lock = self.name,
                "a session lock was dropped without release; closing its connection"
            );
            drop(conn.detach());
        }
    }
}
