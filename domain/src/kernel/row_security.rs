//! Row-level security: which tenant's rows PostgreSQL lets this piece of
//! work see, as a second wall behind the tenant scopes of the queries.
//!
//! On PostgreSQL every tenant-owned table has a policy (migration
//! `m20261126_090000_row_level_security`) that shows and accepts only the
//! rows whose `tenant_id` equals the session setting `brainstem.tenant`, or
//! every row when the setting is `*`. The setting comes from the task-local
//! [`RowAccess`] of the code that takes a connection from the pool: the
//! pool's `before_acquire` and `after_connect` hooks ([`set_on_acquire`],
//! [`set_on_connect`]) write it on the connection before the connection is
//! handed out, in the same round trip that used to be the pool's liveness
//! ping. A role that row-level security does not bind (a superuser, which
//! the server warns about at start) would ignore it, so for such a pool
//! the hooks only ping (`kernel::db::connect`).
//!
//! Invariants:
//! - Work that names no access sees no tenant-owned row at all: a query that
//!   forgets its scope, run outside [`as_tenant`], returns nothing rather than
//!   another tenant's rows, and its inserts are refused.
//! - Entry points name the access once: a GraphQL operation or subscription
//!   runs as its caller's tenant, an executor step as its task's tenant.
//!   Work that must cross tenants names its [`Bypass`] reason with
//!   [`as_platform`]; each reason is a variant here, listed with why it is
//!   safe in `tests/e2e/scoping.rs`, and counted in
//!   `brainstem_row_security_bypass_total{reason}`.
//! - A task spawned from scoped work keeps the access only if spawned with
//!   [`spawn`]; `tokio::spawn` starts with none (and so sees nothing).
//! - SQLite has no row-level security; there the tenant scopes of the
//!   queries are the only wall.

use std::{
    future::Future,
    pin::Pin,
    sync::atomic::{AtomicU64, Ordering},
    task::{Context, Poll},
};

use brainstem_entity::TenantId;
use futures_util::Stream;
use sea_orm::{
    ConnectionTrait, DbBackend, DbErr, Statement,
    sqlx::{self, Executor, postgres::PgConnection},
};
use tokio::task::JoinHandle;

use crate::kernel::principal::Principal;

tokio::task_local! {
    static ACCESS: RowAccess;
}

/// Which rows of tenant-owned tables the current task may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowAccess {
    /// One tenant's rows.
    Tenant(TenantId),
    /// Every tenant's rows, for the reason named.
    Platform(Bypass),
}

/// Why a piece of work reads or writes across tenants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bypass {
    /// Applying migrations (a data migration may touch every tenant's rows).
    Migration,
    /// Finding an API key by the hash of its secret, before its tenant is
    /// known.
    Authentication,
    /// The executor's claim and reaper: the queue is shared by all tenants.
    Queue,
    /// Start-up and maintenance passes over every tenant (plan integrity
    /// check, trial expiry, per-tenant vector indexes, memory maintenance,
    /// re-sealing connection secrets).
    Maintenance,
    /// A platform admin's operation, opened with an audited `PlatformScope`.
    PlatformAdmin,
}

impl Bypass {
    pub const ALL: [Self; 5] = [
        Self::Migration,
        Self::Authentication,
        Self::Queue,
        Self::Maintenance,
        Self::PlatformAdmin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Migration => "migration",
            Self::Authentication => "authentication",
            Self::Queue => "queue",
            Self::Maintenance => "maintenance",
            Self::PlatformAdmin => "platform_admin",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static BYPASSES: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// How often work has entered each bypass since the process started.
pub fn bypass_count(reason: Bypass) -> u64 {
    BYPASSES[reason.index()].load(Ordering::Relaxed)
}

/// Run `work` seeing only `tenant`'s rows.
pub async fn as_tenant<F: Future>(tenant: TenantId, work: F) -> F::Output {
    ACCESS.scope(RowAccess::Tenant(tenant), work).await
}

/// Run `work` seeing every tenant's rows, for `reason`.
pub async fn as_platform<F: Future>(reason: Bypass, work: F) -> F::Output {
    BYPASSES[reason.index()].fetch_add(1, Ordering::Relaxed);
    ACCESS.scope(RowAccess::Platform(reason), work).await
}

/// Run `work` with `access` (what [`current`] returned elsewhere), or with
/// none.
pub async fn with<F: Future>(access: Option<RowAccess>, work: F) -> F::Output {
    match access {
        Some(access) => ACCESS.scope(access, work).await,
        None => work.await,
    }
}

/// The access of the current task, if it named one.
pub fn current() -> Option<RowAccess> {
    ACCESS.try_with(|access| *access).ok()
}

/// The access of a caller: its tenant's rows, or none (a platform admin
/// with no tenant reaches tenants' rows only through audited bypasses).
pub fn of_principal(principal: &Principal) -> Option<RowAccess> {
    principal.tenant.map(RowAccess::Tenant)
}

/// A stream polled with `access`, whichever task polls it (a subscription
/// polled by its connection's task, which serves one caller).
pub fn stream<S: Stream + Send + 'static>(
    access: Option<RowAccess>,
    inner: S,
) -> impl Stream<Item = S::Item> + Send + 'static {
    Scoped {
        access,
        inner: Box::pin(inner),
    }
}

struct Scoped<S> {
    access: Option<RowAccess>,
    inner: Pin<Box<S>>,
}

impl<S: Stream> Stream for Scoped<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        match self.access {
            Some(access) => ACCESS.sync_scope(access, || self.inner.as_mut().poll_next(cx)),
            None => self.inner.as_mut().poll_next(cx),
        }
    }
}

/// `tokio::spawn` that carries the current access into the new task.
pub fn spawn<F>(work: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let access = current();
    tokio::spawn(with(access, work))
}

/// The value of `brainstem.tenant` for the current task: a tenant's id,
/// `*` for every tenant, or empty for none.
fn setting() -> String {
    match current() {
        Some(RowAccess::Tenant(tenant)) => tenant.uuid().to_string(),
        Some(RowAccess::Platform(_)) => "*".to_owned(),
        None => String::new(),
    }
}

/// Write the current task's access on a pooled PostgreSQL connection (the
/// pool's `before_acquire` hook). A connection that cannot take it is
/// broken and is dropped by the pool.
pub async fn set_on_acquire(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    conn.execute(sqlx::query("SELECT set_config('brainstem.tenant', $1, false)").bind(setting()))
        .await
        .map(|_| ())
}

/// The same on a new connection (the pool's `after_connect` hook), in the
/// same statement asking whether row-level security binds the connection's
/// role: `false` for a superuser or a role with `BYPASSRLS`, which see
/// every row whatever the setting says.
pub async fn set_on_connect(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT NOT (rolsuper OR rolbypassrls) FROM pg_roles, \
         set_config('brainstem.tenant', $1, false) WHERE rolname = current_user",
    )
    .bind(setting())
    .fetch_one(conn)
    .await
}

/// Narrow an open transaction that was begun under a bypass to one tenant's
/// rows, until it ends (PostgreSQL; nothing to do on SQLite).
pub async fn narrow<C: ConnectionTrait>(txn: &C, tenant: TenantId) -> Result<(), DbErr> {
    if txn.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT set_config('brainstem.tenant', $1, true)",
        [tenant.uuid().to_string().into()],
    ))
    .await
    .map(|_| ())
}

/// The statements that protect `table` (which has a `tenant_id` column):
/// row-level security on, binding the owner too, and the `tenant_rows`
/// policy.
pub fn policy_sql(table: &str) -> String {
    format!(
        "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY; \
         ALTER TABLE {table} FORCE ROW LEVEL SECURITY; \
         CREATE POLICY tenant_rows ON {table} USING ({POLICY_CONDITION}) \
         WITH CHECK ({POLICY_CONDITION})"
    )
}

/// The SQL condition of the policies, on a table's `tenant_id` column.
pub const POLICY_CONDITION: &str = "current_setting('brainstem.tenant', true) = '*' \
     OR tenant_id = NULLIF(NULLIF(current_setting('brainstem.tenant', true), ''), '*')::uuid";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_setting_follows_the_named_access() {
        assert_eq!(setting(), "");
        let tenant = TenantId::new();
        let inner = as_tenant(tenant, async { setting() }).await;
        assert_eq!(inner, tenant.uuid().to_string());
        let platform = as_platform(Bypass::Queue, async {
            // A tenant named inside a bypass narrows it again.
            let narrowed = as_tenant(tenant, async { setting() }).await;
            (setting(), narrowed)
        })
        .await;
        assert_eq!(platform, ("*".to_owned(), tenant.uuid().to_string()));
        assert!(bypass_count(Bypass::Queue) >= 1);
    }

    #[tokio::test]
    async fn a_scoped_stream_sees_its_access_whoever_polls_it() {
        use futures_util::StreamExt;
        let tenant = TenantId::new();
        let seen: Vec<String> = stream(
            Some(RowAccess::Tenant(tenant)),
            futures_util::stream::iter(0..2).map(|_| setting()),
        )
        .collect()
        .await;
        assert_eq!(seen, vec![tenant.uuid().to_string(); 2]);
    }

    #[tokio::test]
    async fn spawned_work_keeps_the_access_only_through_spawn() {
        let tenant = TenantId::new();
        let (kept, lost) = as_tenant(tenant, async {
            let kept = spawn(async { setting() }).await;
            let lost = tokio::spawn(async { setting() }).await;
            (kept, lost)
        })
        .await;
        assert_eq!(kept.ok(), Some(tenant.uuid().to_string()));
        assert_eq!(lost.ok(), Some(String::new()));
    }
}
