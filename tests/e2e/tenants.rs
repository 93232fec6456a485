//! Tenants are created and listed by platform admins only, and every such
//! use is written to the audit log.

use brainstem_domain::{Role, audit::AuditLog};
use brainstem_entity::{audit_log, platform_audit_log};
use brainstem_migration::{Migrator, MigratorTrait};
use sea_orm::{ConnectionTrait, EntityTrait, Statement};
use serde_json::json;

use crate::{
    helpers::{Backend, TestApp},
    on_both_backends,
};

const CREATE: &str = "mutation($input: CreateTenantInput!) { createTenant(input: $input) { tenant { id slug name } } }";

on_both_backends!(
    platform_admin_creates_and_lists_tenants_with_audit,
    tenant_input_is_validated,
    only_platform_admins_manage_tenants,
    platform_rows_have_their_own_audit_log,
);

/// Rows of `action` in `table`: `audit_log` (a tenant's) or
/// `platform_audit_log` (actions on no tenant).
async fn audit_count(app: &TestApp, table: &str, action: &str) -> i64 {
    let row = sea_orm::ConnectionTrait::query_one_raw(
        &app.outside_db().await,
        sea_orm::Statement::from_string(
            app.domain.db.get_database_backend(),
            format!("SELECT COUNT(*) AS n FROM {table} WHERE action = '{action}'"),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    row.try_get::<i64>("", "n").unwrap()
}

async fn platform_admin_creates_and_lists_tenants_with_audit(app: TestApp) {
    let admin = app.platform_admin_token();
    let res = app
        .graphql(
            Some(&admin),
            CREATE,
            json!({"input": {"slug": "globex", "name": "Globex"}}),
        )
        .await;
    let tenant = res.data()["createTenant"]["tenant"].clone();
    assert_eq!(tenant["slug"], "globex");
    assert_eq!(
        audit_count(&app, "platform_audit_log", "tenant.create").await,
        1
    );

    let res = app
        .graphql(
            Some(&admin),
            "{ tenants(first: 10) { edges { node { slug } } } }",
            json!({}),
        )
        .await;
    let slugs = res.data()["tenants"]["edges"].to_string();
    assert!(slugs.contains("globex"));
    assert_eq!(
        audit_count(&app, "platform_audit_log", "tenant.list").await,
        1
    );

    // node(id:) on a tenant the admin does not belong to is audited too.
    let res = app
        .graphql(
            Some(&admin),
            "query($id: ID!) { node(id: $id) { ... on Tenant { slug } } }",
            json!({"id": tenant["id"]}),
        )
        .await;
    assert_eq!(res.data()["node"]["slug"], "globex");
    assert_eq!(audit_count(&app, "audit_log", "tenant.read").await, 1);

    // Tenant admins read their own tenant's audit rows; hashes verify.
    let (_, _) = app.create_api_key("globex", &["admin"]).await;
    let scope = brainstem_domain::TenantScope::new(
        app.domain.tenants.resolve_claim("globex").await.unwrap().id,
    );
    let rows = crate::helpers::in_tenant(scope, app.domain.audit.list(scope, Default::default()))
        .await
        .unwrap()
        .items;
    let actions: Vec<&str> = rows.iter().map(|r| r.action.as_str()).collect();
    // The admin's read of this tenant is recorded against it, then the key.
    assert_eq!(actions, ["tenant.read", "api_key.create"]);
    assert!(
        rows.iter().all(AuditLog::verify),
        "stored rows match their hashes"
    );
}

async fn tenant_input_is_validated(app: TestApp) {
    let admin = app.platform_admin_token();
    app.create_tenant("acme").await;
    let res = app
        .graphql(
            Some(&admin),
            CREATE,
            json!({"input": {"slug": "acme", "name": "Again"}}),
        )
        .await;
    assert_eq!(res.error_code(), "CONFLICT");
    assert!(res.error_message().contains("acme"));
    for slug in ["A", "Bad Slug", "-x"] {
        let res = app
            .graphql(
                Some(&admin),
                CREATE,
                json!({"input": {"slug": slug, "name": "n"}}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{slug}: {}", res.body);
    }
}

async fn only_platform_admins_manage_tenants(app: TestApp) {
    app.create_tenant("acme").await;
    let tenant_admin = app.token(Some("acme"), &[Role::TenantAdmin]);
    let res = app
        .graphql(
            Some(&tenant_admin),
            CREATE,
            json!({"input": {"slug": "evil", "name": "Evil"}}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    let res = app
        .graphql(
            Some(&tenant_admin),
            "{ tenants { edges { node { slug } } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    assert_eq!(
        audit_count(&app, "platform_audit_log", "tenant.list").await,
        0
    );
}

/// A platform admin's actions on no tenant are kept in
/// `platform_audit_log`, and the migration that split them out of
/// `audit_log` moves them back and forth whole: undone, every row is in
/// `audit_log` again (the platform's with an empty tenant); done again,
/// each is where it was, and every hash still verifies.
async fn platform_rows_have_their_own_audit_log(app: TestApp) {
    let admin = app.platform_admin_token();
    app.graphql(
        Some(&admin),
        CREATE,
        json!({"input": {"slug": "globex", "name": "Globex"}}),
    )
    .await
    .data();
    app.create_api_key("globex", &["tasks:read"]).await;
    let db = app.outside_db().await;
    let backend = db.get_database_backend();
    // Each table's ids, as text (SQLite keeps a uuid as 16 bytes).
    let id = match backend {
        sea_orm::DbBackend::Sqlite => "lower(hex(id))",
        _ => "replace(CAST(id AS TEXT), '-', '')",
    };
    let ids = |from: &'static str| {
        let db = &db;
        async move {
            let sql = format!("SELECT {id} AS id FROM {from}");
            let mut ids: Vec<String> = db
                .query_all_raw(Statement::from_string(backend, sql))
                .await
                .unwrap()
                .iter()
                .map(|r| r.try_get::<String>("", "id").unwrap())
                .collect();
            ids.sort();
            ids
        }
    };
    const PLATFORM: &str = "platform_audit_log";
    const TENANTS: &str = "audit_log";
    let (platform, tenants) = (ids(PLATFORM).await, ids(TENANTS).await);
    assert!(!platform.is_empty() && !tenants.is_empty());

    let split = Migrator::migrations()
        .iter()
        .position(|m| m.name() == "m20261129_180000_platform_audit_log")
        .unwrap();
    Migrator::down(&db, Some((Migrator::migrations().len() - split) as u32))
        .await
        .unwrap();
    let mut all = [platform.clone(), tenants.clone()].concat();
    all.sort();
    assert_eq!(ids(TENANTS).await, all);
    assert_eq!(ids("audit_log WHERE tenant_id IS NULL").await, platform);
    Migrator::up(&db, None).await.unwrap();
    assert_eq!(ids(PLATFORM).await, platform);
    assert_eq!(ids(TENANTS).await, tenants);

    for row in platform_audit_log::Entity::find().all(&db).await.unwrap() {
        assert!(AuditLog::verify(&row.into()));
    }
    for row in audit_log::Entity::find().all(&db).await.unwrap() {
        assert!(AuditLog::verify(&row.into()));
    }
}

/// First start on an empty embedded store creates `demo`; the next does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_embedded_start_creates_the_demo_tenant() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let demo = app.domain.tenants.resolve_claim("demo").await.unwrap();
    assert_eq!(demo.name, "Demo");
    assert!(app.domain.tenants.ensure_demo().await.unwrap().is_none());
    let token = app.admin_token("demo");
    let res = app
        .graphql(Some(&token), "{ viewer { tenant { name } } }", json!({}))
        .await;
    assert_eq!(res.data()["viewer"]["tenant"]["name"], "Demo");
}
