//! Row-level security on PostgreSQL (ARCHITECTURE.md, "Tenancy"): the
//! second wall behind the tenant scopes of the queries.
//!
//! Two tenants' data is written through the API (tasks and their steps and
//! events, plans, keys, connections, conversations, entities, memories with
//! their versions, events, mentions and vectors, audit rows). Then, as the
//! role the server connects as:
//! - a query with no tenant named sees no row of any tenant-owned table, and
//!   an insert is refused;
//! - a connection naming one tenant sees exactly that tenant's rows;
//! - the server's own pool, used by work that named no access, sees nothing.
//!
//! Every table with a `tenant_id` column must have row security on, forced
//! (so that it binds the tables' owner, the server's role) and the
//! `tenant_rows` policy.

use std::collections::BTreeMap;

use brainstem_domain::row_security::{self, Bypass};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::json;

use crate::{
    helpers::{Backend, TestApp, connect_single, superuser_url},
    memory::{entity, remember_id},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_a_tenant_sees_no_tenants_rows() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let acme = seed(&app, "acme").await;
    let other = seed(&app, "other").await;
    let superuser = app.outside_db().await;
    let tables = tenant_tables(&superuser).await;
    assert!(tables.len() >= 20, "{tables:?}");

    // What is there, as the superuser (whom row security does not bind).
    let mut stored = BTreeMap::new();
    for table in &tables {
        for tenant in [&acme, &other] {
            let n = count(
                &superuser,
                &format!("SELECT count(*) AS n FROM {table} WHERE tenant_id = '{tenant}'"),
            )
            .await;
            stored.insert((table.clone(), tenant.clone()), n);
        }
    }
    let seeded: Vec<&String> = tables
        .iter()
        .filter(|t| stored[&((*t).clone(), acme.clone())] > 0)
        .collect();
    for table in [
        "tasks",
        "task_steps",
        "task_events",
        "plans",
        "api_keys",
        "audit_log",
        "connections",
        "conversations",
        "kg_entities",
        "memories",
        "memory_mentions",
        "memory_embeddings",
    ] {
        assert!(
            seeded.iter().any(|t| t.as_str() == table),
            "{table} was not seeded"
        );
    }

    // The server's role, naming no tenant: nothing, in every table.
    let app_role = connect_single(&app.config.database_url).await;
    for table in &tables {
        let n = count(&app_role, &format!("SELECT count(*) AS n FROM {table}")).await;
        assert_eq!(n, 0, "{table}: rows visible without a tenant");
    }
    // Nor can it write a row for a tenant it did not name.
    let refused = app_role
        .execute_unprepared(&format!(
            "INSERT INTO conversations (id, tenant_id, subject, title, created_at, updated_at) \
             VALUES (gen_random_uuid(), '{acme}', 'x', 'x', now(), now())"
        ))
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("row-level security"),
        "{refused}"
    );

    // Naming a tenant shows that tenant's rows, all of them, and no other.
    app_role
        .execute_unprepared(&format!(
            "SELECT set_config('brainstem.tenant', '{acme}', false)"
        ))
        .await
        .unwrap();
    for table in &tables {
        let visible = count(&app_role, &format!("SELECT count(*) AS n FROM {table}")).await;
        let own = count(
            &app_role,
            &format!("SELECT count(*) AS n FROM {table} WHERE tenant_id = '{acme}'"),
        )
        .await;
        assert_eq!(visible, own, "{table}: another tenant's rows are visible");
        assert_eq!(own, stored[&(table.clone(), acme.clone())], "{table}");
    }

    // The server's own pool: work that named no access sees nothing; work
    // that names a tenant sees its rows; a bypass sees both tenants'.
    let tasks =
        |db: DatabaseConnection| async move { count(&db, "SELECT count(*) AS n FROM tasks").await };
    assert_eq!(tasks(app.domain.db.clone()).await, 0);
    let acme_id = acme.parse::<uuid::Uuid>().unwrap().into();
    let own = row_security::as_tenant(acme_id, tasks(app.domain.db.clone())).await;
    assert_eq!(own, stored[&("tasks".to_owned(), acme.clone())]);
    let all = row_security::as_platform(Bypass::Maintenance, tasks(app.domain.db.clone())).await;
    assert_eq!(
        all,
        own + stored[&("tasks".to_owned(), other.clone())],
        "a bypass sees every tenant"
    );

    // Each bypass is counted by its reason: the executor's claims crossed
    // tenants to find the tasks above.
    let metrics = app.metrics_text().await;
    let claims: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("brainstem_row_security_bypass_total{reason=\"queue\"} "))
        .expect("the bypass counter is exported")
        .parse()
        .unwrap();
    assert!(claims >= 2, "{claims}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_table_has_forced_row_security_and_its_policy() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let superuser = app.outside_db().await;
    let tables = tenant_tables(&superuser).await;
    let unprotected: Vec<String> = {
        let rows = superuser
            .query_all_raw(Statement::from_string(
                DbBackend::Postgres,
                "SELECT c.relname::text AS name, c.relrowsecurity AS on, \
                 c.relforcerowsecurity AS forced, \
                 EXISTS (SELECT 1 FROM pg_policies p WHERE p.tablename = c.relname \
                   AND p.policyname = 'tenant_rows' AND p.cmd = 'ALL') AS policy \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = 'public' AND c.relkind = 'r'",
            ))
            .await
            .unwrap();
        rows.iter()
            .filter(|r| {
                let name: String = r.try_get("", "name").unwrap();
                tables.contains(&name)
                    && !(r.try_get::<bool>("", "on").unwrap()
                        && r.try_get::<bool>("", "forced").unwrap()
                        && r.try_get::<bool>("", "policy").unwrap())
            })
            .map(|r| r.try_get("", "name").unwrap())
            .collect()
    };
    assert!(unprotected.is_empty(), "{unprotected:?}");
    // The server's role is one that row security binds.
    let app_role = connect_single(&app.config.database_url).await;
    assert_eq!(
        brainstem_domain::db::role_skipping_row_security(&app_role)
            .await
            .unwrap(),
        None
    );
    let superuser_role = connect_single(&superuser_url(&app.config.database_url)).await;
    assert!(
        brainstem_domain::db::role_skipping_row_security(&superuser_role)
            .await
            .unwrap()
            .is_some()
    );
}

/// The pool writes a tenant's access on each connection it hands out when
/// row security binds its role, and leaves the setting alone for a
/// superuser, whom no policy reads it for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_writes_the_access_only_where_row_security_reads_it() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let tenant: brainstem_domain::TenantId = uuid::Uuid::now_v7().into();
    let setting = |db: DatabaseConnection| async move {
        db.query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT coalesce(current_setting('brainstem.tenant', true), '') AS s",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<String>("", "s")
        .unwrap()
    };
    for (url, written) in [
        (app.config.database_url.clone(), true),
        (superuser_url(&app.config.database_url), false),
    ] {
        let pool = brainstem_domain::db::connect(&url, 2).await.unwrap();
        let seen = row_security::as_tenant(tenant, setting(pool.clone())).await;
        let expected = if written {
            tenant.uuid().to_string()
        } else {
            String::new()
        };
        assert_eq!(seen, expected, "{url}");
        // Still a working pool, also for work that names no access.
        assert_eq!(setting(pool).await, "", "{url}");
    }
}

/// Write one tenant's data through the API; returns the tenant's id.
async fn seed(app: &TestApp, slug: &str) -> String {
    app.create_tenant(slug).await;
    app.create_api_key(slug, &["tasks:read"]).await;
    let published = app
        .publish_plan(
            slug,
            json!({"key": "mark", "intent": "mark", "steps": [
                {"id": "one", "tool": "set_state", "args": {"marked": true}},
                {"id": "two", "tool": "set_state", "args": {"again": true}}
            ]}),
        )
        .await;
    assert!(published.data()["publishPlan"]["plan"]["id"].is_string());
    let task = app
        .start_task(slug, json!({"input": "mark it", "planKey": "mark"}))
        .await;
    assert!(task["id"].is_string(), "{task}");
    app.run_tasks().await;
    let admin = app.admin_token(slug);
    let connection = app
        .graphql(
            Some(&admin),
            "mutation { createConnection(input: {name: \"crm\", kind: \"http\", \
             secret: {token: \"t\"}}) { connection { id } } }",
            json!({}),
        )
        .await;
    assert!(connection.data()["createConnection"]["connection"]["id"].is_string());
    let conversation = app
        .graphql(
            Some(&admin),
            "mutation { startConversation(input: {title: \"Tea\"}) { conversation { id } } }",
            json!({}),
        )
        .await;
    assert!(conversation.data()["startConversation"]["conversation"]["id"].is_string());
    let ann = entity(app, &admin, "person", "Ann").await;
    let bob = entity(app, &admin, "person", "Bob").await;
    remember_id(
        app,
        &admin,
        json!({"content": format!("Ann of {slug} likes tea"), "subjectId": ann, "mentionIds": [bob]}),
    )
    .await;
    app.domain
        .tenants
        .resolve_claim(slug)
        .await
        .unwrap()
        .id
        .to_string()
}

/// The tables of the schema that have a `tenant_id` column.
async fn tenant_tables(db: &DatabaseConnection) -> Vec<String> {
    db.query_all_raw(Statement::from_string(
        DbBackend::Postgres,
        "SELECT table_name::text AS name FROM information_schema.columns \
         WHERE table_schema = 'public' AND column_name = 'tenant_id' ORDER BY 1",
    ))
    .await
    .unwrap()
    .iter()
    .map(|r| r.try_get("", "name").unwrap())
    .collect()
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(DbBackend::Postgres, sql.to_owned()))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "n")
        .unwrap()
}
