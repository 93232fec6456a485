//! The tenancy check that reads queries (ARCHITECTURE.md, "Tenancy"): every
//! SQL statement the server sends while two tenants use it is parsed
//! (sqlparser, PostgreSQL dialect), and each read, update or delete of a
//! tenant-owned table must compare that table's `tenant_id` (by its name or
//! alias) with one value (`=`, or `IN` a list of one; a join's
//! `a.tenant_id = b.tenant_id` counts) unless it ran under an explicit
//! row-security bypass, whose reasons are the reviewed exceptions (listed
//! in `brainstem_domain::row_security::Bypass`, each with why it is safe).
//! One value, not several (`IN (…)` of two, `= ANY`): sharded by tenant
//! (`docs/scale-out.md`), each such statement reaches one shard.
//! Inserts name their tenant in their values, and PostgreSQL's row
//! security refuses any other tenant's. A statement that cannot be parsed
//! fails the check too. (What SeaORM sends unprepared, and what the vector
//! index maintenance sends on a raw connection, is not observed: those are
//! schema set-up and maintenance under bypasses, read by
//! `tests/e2e/scoping.rs`.)
//!
//! The workload covers every area: plans, tasks and their steps and
//! events, reads of them as a web UI makes them, keys, connections,
//! conversations, the knowledge graph, memories with their search, audit
//! rows and guardrails.

use std::{
    collections::BTreeSet,
    ops::ControlFlow,
    sync::{Arc, Mutex},
};

use brainstem_domain::row_security::{self, RowAccess};
use serde_json::json;
use sqlparser::{
    ast::{BinaryOperator, Expr, Ident, Statement, TableFactor, Visit, Visitor, visit_statements},
    dialect::PostgreSqlDialect,
    parser::Parser,
};

use crate::{
    helpers::{Backend, TestApp},
    memory::{entity, remember_id},
};

/// One statement the server sent, and the row access it ran with.
type Sent = (String, Option<RowAccess>);

/// What is wrong with a statement: the tenant tables it reads, updates or
/// deletes from without comparing their `tenant_id`.
fn unscoped_tables(sql: &str, tenant_tables: &BTreeSet<String>) -> Result<Vec<String>, String> {
    read_tables(sql, tenant_tables).map(|reads| reads.unscoped)
}

/// How a statement reaches the tenant tables it reads, updates or deletes
/// from.
#[derive(Debug, Default)]
struct Reads {
    /// Every one of them.
    tables: Vec<String>,
    /// Those whose `tenant_id` it does not compare.
    unscoped: Vec<String>,
    /// Those it compares only with several tenants at once (`IN (…)` of
    /// more than one, `= ANY`, `IN (SELECT …)`): sharded by tenant, such a
    /// statement reaches more than one shard.
    spread: Vec<String>,
}

fn read_tables(sql: &str, tenant_tables: &BTreeSet<String>) -> Result<Reads, String> {
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| e.to_string())?;
    let mut reads = Reads::default();
    let _ = visit_statements(&statements, |statement| {
        if !matches!(
            statement,
            Statement::Query(_) | Statement::Update { .. } | Statement::Delete(_)
        ) {
            return ControlFlow::<()>::Continue(());
        }
        let mut names = Names::default();
        let _ = statement.visit(&mut names);
        for (table, alias) in &names.tables {
            if !tenant_tables.contains(table) {
                continue;
            }
            reads.tables.push(table.clone());
            let comparisons: Vec<bool> = names
                .tenant_compared
                .iter()
                .filter(|(qualifier, _)| match qualifier {
                    Some(q) => q == table || alias.as_deref() == Some(q.as_str()),
                    // An unqualified `tenant_id` is this table's only when
                    // the statement names no other.
                    None => names.tables.len() == 1,
                })
                .map(|(_, one)| *one)
                .collect();
            if comparisons.is_empty() {
                reads.unscoped.push(table.clone());
            } else if !comparisons.contains(&true) {
                reads.spread.push(table.clone());
            }
        }
        ControlFlow::Continue(())
    });
    Ok(reads)
}

/// The tables a statement names (with their aliases) and the qualifiers of
/// the `tenant_id` columns it compares (`None`: unqualified), each with
/// whether it is compared with one value (`=`, or `IN` a list of one).
#[derive(Default)]
struct Names {
    tables: Vec<(String, Option<String>)>,
    tenant_compared: Vec<(Option<String>, bool)>,
    /// The table a table factor or an `INSERT` just named (its relation is
    /// visited next).
    pending: Option<String>,
    /// Whether that name is an `INSERT`'s target (which names its tenant in
    /// its values, and is not a read).
    pending_insert: bool,
}

fn table_name(name: &sqlparser::ast::ObjectName) -> String {
    name.0
        .last()
        .map(|part| part.to_string().trim_matches('"').to_ascii_lowercase())
        .unwrap_or_default()
}

fn unquoted(ident: &Ident) -> String {
    ident.value.to_ascii_lowercase()
}

/// The qualifier of a `tenant_id` column expression, if it is one.
fn tenant_column(expr: &Expr) -> Option<Option<String>> {
    match expr {
        Expr::Identifier(id) if unquoted(id) == "tenant_id" => Some(None),
        Expr::CompoundIdentifier(parts)
            if parts.last().is_some_and(|p| unquoted(p) == "tenant_id") =>
        {
            Some(parts.len().checked_sub(2).map(|i| unquoted(&parts[i])))
        }
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => tenant_column(inner),
        _ => None,
    }
}

impl Visitor for Names {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, .. } = factor {
            let table = table_name(name);
            self.pending = Some(table.clone());
            self.tables
                .push((table, alias.as_ref().map(|a| unquoted(&a.name))));
        }
        ControlFlow::Continue(())
    }

    /// Every table named (an `UPDATE`'s or a `DELETE`'s too), without an
    /// alias unless a table factor gave it one.
    fn pre_visit_relation(&mut self, relation: &sqlparser::ast::ObjectName) -> ControlFlow<()> {
        let table = table_name(relation);
        let named = self.pending.take().as_deref() == Some(table.as_str());
        let inserted = std::mem::take(&mut self.pending_insert);
        if !named && !inserted {
            self.tables.push((table, None));
        }
        ControlFlow::Continue(())
    }

    /// An `INSERT` (also one inside a `WITH`): its target is skipped.
    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<()> {
        if let Statement::Insert(insert) = statement
            && let sqlparser::ast::TableObject::TableName(name) = &insert.table
        {
            self.pending = Some(table_name(name));
            self.pending_insert = true;
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
        let compared = match expr {
            Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } => tenant_column(left)
                .or_else(|| tenant_column(right))
                .map(|q| (q, true)),
            Expr::InList {
                expr,
                list,
                negated: false,
            } => tenant_column(expr).map(|q| (q, list.len() == 1)),
            Expr::InSubquery {
                expr,
                negated: false,
                ..
            } => tenant_column(expr).map(|q| (q, false)),
            Expr::AnyOp { left, .. } => tenant_column(left).map(|q| (q, false)),
            _ => None,
        };
        if let Some(compared) = compared {
            self.tenant_compared.push(compared);
        }
        ControlFlow::Continue(())
    }
}

#[test]
fn the_reader_finds_unscoped_statements_and_accepts_scoped_ones() {
    let tables: BTreeSet<String> = ["tasks", "task_steps", "memories"]
        .map(str::to_owned)
        .into();
    let check = |sql: &str| unscoped_tables(sql, &tables).unwrap();
    // SeaORM's form, a raw one with an alias, joins, subqueries.
    assert!(check(r#"SELECT "tasks"."id" FROM "tasks" WHERE "tasks"."tenant_id" = $1 AND "tasks"."id" = $2"#).is_empty());
    assert!(
        check("SELECT m.id FROM memories m WHERE m.tenant_id = $1 AND m.status = 'ACTIVE'")
            .is_empty()
    );
    assert!(check("UPDATE tasks SET status = $1 WHERE tenant_id = $2 AND id = $3").is_empty());
    assert!(check("SELECT s.id FROM task_steps s WHERE s.tenant_id = ANY($1)").is_empty());
    assert!(check("SELECT t.id FROM tasks t JOIN task_steps s ON s.task_id = t.id AND s.tenant_id = t.tenant_id WHERE t.tenant_id IN ($1, $2)").is_empty());
    // Forgotten scopes, wherever they hide.
    assert_eq!(
        check("SELECT id FROM tasks WHERE status = 'PENDING'"),
        ["tasks"]
    );
    assert_eq!(check("DELETE FROM memories WHERE id = $1"), ["memories"]);
    assert_eq!(
        check(
            "SELECT t.id FROM tasks t JOIN task_steps s ON s.task_id = t.id WHERE t.tenant_id = $1"
        ),
        ["task_steps"]
    );
    assert_eq!(
        check(
            "SELECT t.id FROM tasks t WHERE t.tenant_id = $1 AND t.id IN (SELECT s.task_id FROM task_steps s WHERE s.attempt > 1)"
        ),
        ["task_steps"]
    );
    // Another table's tenant_id does not scope this one.
    assert_eq!(
        check("SELECT m.id FROM memories m, tasks t WHERE t.tenant_id = $1"),
        ["memories"]
    );
    // Inserts name their tenant in their values; other tables are not ours.
    assert!(check("INSERT INTO tasks (id, tenant_id) VALUES ($1, $2)").is_empty());
    assert!(
        check("WITH w0 AS (INSERT INTO task_steps (id, tenant_id) VALUES ($1, $2)) SELECT pg_notify($3, $4)")
            .is_empty()
    );
    // ... but a read inside one is a read.
    assert_eq!(
        check("WITH w0 AS (INSERT INTO tasks (id) SELECT id FROM memories) SELECT 1"),
        ["memories"]
    );
    assert!(check("SELECT id FROM tenants WHERE slug = $1").is_empty());
    assert!(unscoped_tables("SELEKT nonsense", &tables).is_err());

    // Scoped to one tenant (one shard), or to several.
    let spread = |sql: &str| read_tables(sql, &tables).unwrap().spread;
    assert!(spread("SELECT id FROM tasks WHERE tenant_id = $1").is_empty());
    assert!(spread("SELECT id FROM tasks WHERE tenant_id IN ($1)").is_empty());
    assert!(spread("SELECT t.id FROM tasks t JOIN task_steps s ON s.tenant_id = t.tenant_id AND s.task_id = t.id WHERE t.tenant_id = $1").is_empty());
    assert_eq!(
        spread("SELECT id FROM tasks WHERE tenant_id IN ($1, $2)"),
        ["tasks"]
    );
    assert_eq!(
        spread("SELECT id FROM tasks WHERE tenant_id = ANY($1)"),
        ["tasks"]
    );
    assert_eq!(
        spread(
            "SELECT t.id FROM tasks t WHERE t.tenant_id IN (SELECT m.tenant_id FROM memories m WHERE m.tenant_id = $1)"
        ),
        ["tasks"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_on_a_tenant_table_names_its_tenant() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let recorder = sent.clone();
    app.domain
        .statements
        .observe(Arc::new(move |sql: &str| {
            if let Ok(mut sent) = recorder.lock() {
                sent.push((sql.to_owned(), row_security::current()));
            }
        }))
        .unwrap_or_else(|_| panic!("no other observer"));

    for tenant in ["acme", "globex"] {
        work_as_a_tenant(&app, tenant).await;
    }
    // A query that forgets its scope, and one that names two tenants (it
    // would reach two shards), run as a tenant (row security alone would
    // hide the other tenant's rows): the check sees both.
    let acme = app.domain.tenants.resolve_claim("acme").await.unwrap().id;
    let globex = app.domain.tenants.resolve_claim("globex").await.unwrap().id;
    const PLANTED: [&str; 2] = [
        "SELECT id FROM tasks WHERE status = 'COMPLETED'",
        "SELECT id FROM memories WHERE tenant_id IN",
    ];
    for sql in [
        PLANTED[0].to_owned(),
        format!("{} ('{acme}', '{globex}')", PLANTED[1]),
    ] {
        row_security::as_tenant(acme, async {
            sea_orm::ConnectionTrait::query_all_raw(
                &app.domain.db,
                sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, sql),
            )
            .await
            .unwrap()
        })
        .await;
    }

    let tenant_tables: BTreeSet<String> = {
        let outside = app.outside_db().await;
        sea_orm::ConnectionTrait::query_all_raw(
            &outside,
            sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT table_name::text AS name FROM information_schema.columns \
                 WHERE table_schema = 'public' AND column_name = 'tenant_id'",
            ),
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get("", "name").unwrap())
        .collect()
    };
    let sent = sent.lock().unwrap().clone();
    assert!(
        sent.len() > 100,
        "the workload sent {} statements",
        sent.len()
    );
    let mut distinct = BTreeSet::new();
    let mut problems = BTreeSet::new();
    let mut bypassed = 0;
    let mut covered = BTreeSet::new();
    for (sql, access) in &sent {
        if !distinct.insert(sql.clone()) {
            continue;
        }
        if let Some(RowAccess::Platform(_)) = access {
            // A reviewed exception: its reason is a `Bypass` variant.
            bypassed += 1;
            continue;
        }
        match read_tables(sql, &tenant_tables) {
            Ok(reads) if reads.unscoped.is_empty() && reads.spread.is_empty() => {
                covered.extend(reads.tables)
            }
            Ok(reads) if reads.unscoped.is_empty() => {
                problems.insert(format!(
                    "{} of several tenants in: {sql}",
                    reads.spread.join(", ")
                ));
            }
            Ok(reads) => {
                problems.insert(format!("{} unscoped in: {sql}", reads.unscoped.join(", ")));
            }
            Err(e) => {
                problems.insert(format!("cannot parse ({e}): {sql}"));
            }
        }
    }
    assert!(
        bypassed > 0,
        "the executor's claims run under the queue bypass"
    );
    // Exactly the planted queries, and nothing the server sent by itself.
    for planted in PLANTED {
        let found = problems.iter().filter(|p| p.contains(planted)).count();
        assert_eq!(found, 1, "{planted}: {problems:#?}");
    }
    assert_eq!(
        problems.len(),
        PLANTED.len(),
        "statements on tenant tables without their one tenant ({} distinct statements read):\n{}",
        distinct.len(),
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// What a tenant's people and programs do, through the API.
async fn work_as_a_tenant(app: &TestApp, slug: &str) {
    app.create_tenant(slug).await;
    let admin = app.admin_token(slug);
    let (_, key) = app.create_api_key(slug, &["tasks:read"]).await;
    let gql = |token: &str, query: &str, variables: serde_json::Value| {
        let token = token.to_owned();
        let query = query.to_owned();
        async move { app.graphql(Some(&token), &query, variables).await }
    };
    app.publish_plan(
        slug,
        json!({"key": "mark", "intent": "mark", "steps": [
            {"id": "one", "tool": "set_state", "args": {"marked": true}},
            {"id": "gate", "tool": "set_state", "args": {"x": 1}, "requiresReview": true},
            {"id": "two", "tool": "set_state", "args": {"again": true}}
        ]}),
    )
    .await
    .data();
    gql(
        &admin,
        "mutation($c: JSON!) { saveGuardrail(input: {name: \"g\", severity: WARN, condition: $c}) { guardrail { name } } }",
        json!({"c": {"tool": "set_state", "args.again": true}}),
    )
    .await
    .data();
    let task = app
        .start_task(slug, json!({"input": "mark it", "planKey": "mark"}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    let review = app.task(slug, &id).await["pendingReview"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    gql(
        &admin,
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r, decision: APPROVE}) { task { status } } }",
        json!({"t": id, "r": review}),
    )
    .await
    .data();
    app.run_tasks().await;
    assert_eq!(app.task(slug, &id).await["status"], "COMPLETED");
    // What a dashboard reads.
    gql(
        &key,
        "{ tasks(first: 50) { edges { node { id status plan { key version } steps { stepId status attempt durationMs } events(last: 5) { seq kind summary } } } } }",
        json!({}),
    )
    .await
    .data();
    gql(
        &admin,
        "{ plans(first: 20) { edges { node { key version } } } }",
        json!({}),
    )
    .await
    .data();
    gql(
        &admin,
        "{ auditLog(first: 20) { edges { node { action verified } } } }",
        json!({}),
    )
    .await
    .data();
    gql(&admin, "{ guardrails { name activationCount } }", json!({}))
        .await
        .data();
    gql(
        &admin,
        "mutation { createConnection(input: {name: \"crm\", kind: \"http\", secret: {token: \"t\"}}) { connection { id } } }",
        json!({}),
    )
    .await
    .data();
    gql(
        &admin,
        "{ connections(first: 20) { edges { node { name hasSecret } } } }",
        json!({}),
    )
    .await
    .data();
    gql(
        &admin,
        "mutation { startConversation(input: {title: \"Tea\"}) { conversation { id } } }",
        json!({}),
    )
    .await
    .data();
    let ann = entity(app, &admin, "person", "Ann").await;
    let bob = entity(app, &admin, "person", "Bob").await;
    let memory = remember_id(
        app,
        &admin,
        json!({"content": format!("Ann of {slug} likes green tea"), "subjectId": ann, "mentionIds": [bob]}),
    )
    .await;
    gql(
        &admin,
        "mutation($id: ID!) { updateMemory(input: {id: $id, content: \"Ann likes black tea\"}) { memory { id } } }",
        json!({"id": memory}),
    )
    .await
    .data();
    gql(
        &admin,
        "query($ann: ID!) { searchMemories(query: \"tea Ann\", limit: 5) { hits { memory { id content subject { name } } } } \
         dossier(subjectId: $ann) { __typename } entities(first: 10) { edges { node { name } } } }",
        json!({"ann": ann}),
    )
    .await
    .data();
    gql(
        &admin,
        "query($id: ID!) { node(id: $id) { ... on KgEntity { name } } }",
        json!({"id": ann}),
    )
    .await
    .data();
}
