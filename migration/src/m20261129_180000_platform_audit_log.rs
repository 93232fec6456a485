//! The audit log splits by owner: a platform admin's actions on no tenant
//! (listing or creating tenants, publishing a capability) move to
//! `platform_audit_log`, and `audit_log` holds only tenant rows, its
//! `tenant_id` required. So `audit_log` is a tenant table like the others:
//! on PostgreSQL its key becomes `(tenant_id, id)` (the rule of
//! `m20261129_160000_tenant_keys`), ready to be distributed by tenant, and
//! `platform_audit_log` is a table of no tenant (a reference table on
//! Citus, `docs/scale-out.md`), without row security.
//!
//! Rows move as they are, hashes included: a platform row's hash was taken
//! with its tenant empty and still verifies. The move reads and deletes
//! `audit_log` under the row-security bypass (`brainstem.tenant = '*'`, for
//! this transaction only), since its policy hides platform rows from every
//! tenant. SQLite cannot require a column in place: the table is rebuilt
//! with the tenant rows.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Audit {
    Id,
    TenantId,
    Actor,
    Action,
    Target,
    Data,
    Hash,
    CreatedAt,
    RequestId,
    TraceId,
}

/// An audit table named `table`: the columns of `audit_log`, the tenant's
/// as given (none for the platform's).
fn audit_table(table: &str, tenant: Option<ColumnDef>) -> TableCreateStatement {
    let mut create = Table::create();
    create.table(Alias::new(table)).col(pk_uuid(Audit::Id));
    if let Some(tenant) = tenant {
        create.col(tenant);
    }
    create
        .col(string(Audit::Actor))
        .col(string(Audit::Action))
        .col(string(Audit::Target))
        .col(json_binary(Audit::Data))
        .col(string(Audit::Hash))
        .col(timestamp_with_time_zone(Audit::CreatedAt))
        .col(string_null(Audit::RequestId))
        .col(string_null(Audit::TraceId))
        .to_owned()
}

/// The columns both tables share, in the same order.
const SHARED: &str = "id, actor, action, target, data, hash, created_at, request_id, trace_id";

/// PostgreSQL: move, then require the tenant and key by it.
const POSTGRES: &str = "\
SELECT set_config('brainstem.tenant', '*', true); \
INSERT INTO platform_audit_log (id, actor, action, target, data, hash, created_at, request_id, trace_id) \
  SELECT id, actor, action, target, data, hash, created_at, request_id, trace_id \
  FROM audit_log WHERE tenant_id IS NULL; \
DELETE FROM audit_log WHERE tenant_id IS NULL; \
ALTER TABLE audit_log ALTER COLUMN tenant_id SET NOT NULL; \
ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey; \
ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (tenant_id, id); \
DROP INDEX IF EXISTS ix_audit_log_tenant_id";

/// SQLite: `audit_log` made again (its tenant required or not) from its
/// tenant rows, and the platform rows when they go back.
async fn rebuild_on_sqlite(
    manager: &SchemaManager<'_>,
    tenant_required: bool,
    platform_rows_back: bool,
) -> Result<(), DbErr> {
    let tenant = if tenant_required {
        uuid(Audit::TenantId)
    } else {
        uuid_null(Audit::TenantId)
    };
    manager
        .create_table(audit_table("audit_log_next", Some(tenant)))
        .await?;
    let db = manager.get_connection();
    db.execute_unprepared(&format!(
        "INSERT INTO audit_log_next (tenant_id, {SHARED}) \
           SELECT tenant_id, {SHARED} FROM audit_log WHERE tenant_id IS NOT NULL"
    ))
    .await?;
    if platform_rows_back {
        db.execute_unprepared(&format!(
            "INSERT INTO audit_log_next ({SHARED}) SELECT {SHARED} FROM platform_audit_log"
        ))
        .await?;
    }
    db.execute_unprepared(
        "DROP TABLE audit_log; \
         ALTER TABLE audit_log_next RENAME TO audit_log; \
         CREATE INDEX ix_audit_log_tenant_id ON audit_log (tenant_id, id)",
    )
    .await
    .map(|_| ())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(audit_table("platform_audit_log", None))
            .await?;
        let db = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared(POSTGRES).await?;
            return Ok(());
        }
        db.execute_unprepared(&format!(
            "INSERT INTO platform_audit_log ({SHARED}) SELECT {SHARED} FROM audit_log WHERE tenant_id IS NULL"
        ))
        .await?;
        rebuild_on_sqlite(manager, true, false).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The platform rows go back with an empty tenant.
        let db = manager.get_connection();
        if manager.get_database_backend() == DbBackend::Postgres {
            db.execute_unprepared(&format!(
                "SELECT set_config('brainstem.tenant', '*', true); \
                 ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey; \
                 ALTER TABLE audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id); \
                 ALTER TABLE audit_log ALTER COLUMN tenant_id DROP NOT NULL; \
                 CREATE INDEX ix_audit_log_tenant_id ON audit_log (tenant_id, id); \
                 INSERT INTO audit_log ({SHARED}) SELECT {SHARED} FROM platform_audit_log"
            ))
            .await?;
        } else {
            rebuild_on_sqlite(manager, false, true).await?;
        }
        manager
            .drop_table(
                Table::drop()
                    .table(Alias::new("platform_audit_log"))
                    .to_owned(),
            )
            .await
            .map(|_| ())
    }
}
