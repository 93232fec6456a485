//! The lease of a durable background job (a bulk retry, a memory import):
//! a job row is `RUNNING` until its runner marks it `COMPLETED`, and while
//! it runs one runner at a time holds it (`lease_owner`,
//! `lease_expires_at`). A runner takes the lease before each batch and so
//! renews it; a runner that goes silent (a crashed process) loses it when
//! it expires, and any process's housekeeping sweep finds the job
//! ([`abandoned`]) and starts another runner.
//!
//! Invariants:
//! - The lease is taken by one compare-and-set on the job row: free, held
//!   by the same owner, or expired. Of two runners, one wins.
//! - Only the lease holder completes a job, and completing clears the lease.
//! - The job's table is tenant-owned: every statement here is confined to
//!   the caller's scope, except [`abandoned`], which looks across tenants
//!   under the queue bypass and reads only ids and tenants.

use std::time::Duration;

use brainstem_entity::{TenantId, TenantOwned, TenantScope};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, QueryFilter, QuerySelect, sea_query::Expr};
use uuid::Uuid;

use crate::{
    Error, Result,
    kernel::row_security::{self, Bypass, as_platform},
};

/// A job with items still to handle.
pub const RUNNING: &str = "RUNNING";
/// A job whose items all have their outcome.
pub const COMPLETED: &str = "COMPLETED";

/// The columns of a job table that the lease reads and writes.
pub struct JobColumns<C> {
    pub id: C,
    pub status: C,
    pub lease_owner: C,
    pub lease_expires_at: C,
    pub updated_at: C,
    pub finished_at: C,
}

/// A tenant-owned table of leased jobs.
pub trait LeasedJob: TenantOwned {
    fn columns() -> JobColumns<Self::Column>;
}

/// Start a runner of job `id` in the background, under `scope`'s tenant's
/// row access, as a fresh owner named `<kind>:<uuid>`: `run` gets the owner
/// and works through the job. An error is logged; the job is taken up again
/// when its lease expires.
pub fn spawn_runner<F, Fut>(scope: TenantScope, id: Uuid, kind: &'static str, run: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = Result<u64>> + Send + 'static,
{
    tokio::spawn(row_security::as_tenant(scope.tenant_id(), async move {
        let owner = format!("{kind}:{}", Uuid::now_v7());
        if let Err(err) = run(owner).await {
            tracing::error!(job = %id, kind, %err, "a job's runner stopped; the job is taken up again when its lease expires");
        }
    }));
}

/// Take or renew the lease of running job `id` for `lease` as `owner`: free,
/// already ours, or expired before `expired_before` (default now). Whether
/// this runner may go on.
pub async fn take<E: LeasedJob, C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: Uuid,
    owner: &str,
    lease: Duration,
    expired_before: Option<DateTime<Utc>>,
) -> Result<bool> {
    let c = E::columns();
    let now = Utc::now();
    let until = now + chrono::Duration::from_std(lease).map_err(Error::internal)?;
    let taken = E::update_many_in(scope)
        .col_expr(c.lease_owner, Expr::value(owner))
        .col_expr(c.lease_expires_at, Expr::value(until))
        .col_expr(c.updated_at, Expr::value(now))
        .filter(c.id.eq(id))
        .filter(c.status.eq(RUNNING))
        .filter(
            Condition::any()
                .add(c.lease_owner.is_null())
                .add(c.lease_owner.eq(owner))
                .add(c.lease_expires_at.lt(expired_before.unwrap_or(now))),
        )
        .exec(db)
        .await?;
    Ok(taken.rows_affected == 1)
}

/// Mark job `id`, whose items all have their outcome, completed and free
/// its lease, if `owner` holds it. Whether it did.
pub async fn finish<E: LeasedJob, C: ConnectionTrait>(
    db: &C,
    scope: TenantScope,
    id: Uuid,
    owner: &str,
) -> Result<bool> {
    let c = E::columns();
    let now = Utc::now();
    let done = E::update_many_in(scope)
        .col_expr(c.status, Expr::value(COMPLETED))
        .col_expr(c.lease_owner, Expr::value(Option::<String>::None))
        .col_expr(
            c.lease_expires_at,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(c.finished_at, Expr::value(now))
        .col_expr(c.updated_at, Expr::value(now))
        .filter(c.id.eq(id))
        .filter(c.lease_owner.eq(owner))
        .exec(db)
        .await?;
    Ok(done.rows_affected == 1)
}

/// Every tenant's running jobs whose runner is gone (a lease that expired
/// before `now`, or was never taken): their ids and tenants.
pub async fn abandoned<E: LeasedJob, C: ConnectionTrait>(
    db: &C,
    now: DateTime<Utc>,
) -> Result<Vec<(Uuid, TenantId)>> {
    let c = E::columns();
    // unscoped: the sweep looks at every tenant's abandoned jobs; it reads
    // only ids and tenants, and each job then runs under its own tenant.
    let rows: Vec<(Uuid, Uuid)> = as_platform(
        Bypass::Queue,
        E::find()
            .filter(c.status.eq(RUNNING))
            .filter(
                Condition::any()
                    .add(c.lease_expires_at.is_null())
                    .add(c.lease_expires_at.lt(now)),
            )
            .select_only()
            .column(c.id)
            .column(E::tenant_column())
            .into_tuple()
            .all(db),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, tenant)| (id, tenant.into()))
        .collect())
}
