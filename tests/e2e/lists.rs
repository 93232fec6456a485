//! Lists a dashboard can use: every connection pages both ways
//! (`first/after`, `last/before`) with exact `pageInfo` on the side a page
//! is read from, and the lists a dashboard shows newest first take
//! `orderBy`, whose cursors continue a request in the same order.

use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(
    every_connection_pages_both_ways_in_each_order,
    bad_page_arguments_are_refused,
    reviews_of_every_task_list_in_each_order,
    children_and_tenants_page_both_ways,
    null_page_arguments_count_as_absent,
);

/// A server whose rate limits do not stop a test that pages through
/// lists many times over.
pub async fn unlimited(backend: Backend) -> TestApp {
    TestApp::spawn_with(backend, |c| {
        c.rate_limit_per_tenant_rps = 0.0;
        c.rate_limit_per_key_rps = 0.0;
    })
    .await
}

/// A connection to walk: the query text around its arguments and where its
/// connection sits in the answer.
pub struct List {
    pub name: &'static str,
    /// The query up to the connection's arguments, e.g. `tasks(`.
    pub open: String,
    /// What closes the query after the connection's selection.
    pub close: &'static str,
    pub path: Vec<&'static str>,
    /// Whether it takes `orderBy`.
    pub ordered: bool,
}

impl List {
    pub fn top(name: &'static str, ordered: bool) -> Self {
        Self {
            name,
            open: format!("{name}("),
            close: "",
            path: vec![name],
            ordered,
        }
    }
}

/// One page as the client sees it.
#[derive(Debug, PartialEq)]
pub struct Page {
    pub ids: Vec<String>,
    pub has_previous: bool,
    pub has_next: bool,
    pub start: Option<String>,
    pub end: Option<String>,
}

/// The page `args` asks for of `list`, as `token`.
pub async fn page(app: &TestApp, token: &str, list: &List, args: &str) -> Page {
    let query = format!(
        "{{ {open}{args}) {{ pageInfo {{ hasPreviousPage hasNextPage startCursor endCursor }} \
         edges {{ cursor node {{ id }} }} }} {close} }}",
        open = list.open,
        close = list.close,
    );
    let res = app.graphql(Some(token), &query, json!({})).await;
    let mut at = res.data();
    for key in &list.path {
        at = &at[*key];
    }
    let edges = at["edges"].as_array().expect("edges");
    let info = &at["pageInfo"];
    let cursors: Vec<&str> = edges
        .iter()
        .map(|e| e["cursor"].as_str().unwrap())
        .collect();
    assert_eq!(
        info["startCursor"].as_str(),
        cursors.first().copied(),
        "{}",
        list.name
    );
    assert_eq!(
        info["endCursor"].as_str(),
        cursors.last().copied(),
        "{}",
        list.name
    );
    Page {
        ids: edges
            .iter()
            .map(|e| e["node"]["id"].as_str().unwrap().to_owned())
            .collect(),
        has_previous: info["hasPreviousPage"].as_bool().unwrap(),
        has_next: info["hasNextPage"].as_bool().unwrap(),
        start: info["startCursor"].as_str().map(str::to_owned),
        end: info["endCursor"].as_str().map(str::to_owned),
    }
}

/// Walk `list` (which holds exactly `expected`, in the order `order_by`
/// gives) two at a time forward with `first/after` and back with
/// `last/before`, checking each page and its `pageInfo`, and the empty
/// pages past either end.
pub async fn walk(app: &TestApp, token: &str, list: &List, order_by: &str, expected: &[String]) {
    let order = if order_by.is_empty() {
        String::new()
    } else {
        format!(", orderBy: {order_by}")
    };
    let what = format!("{} {order_by}", list.name);
    let n = expected.len();
    assert!(n >= 3, "{what}: walk at least two pages");

    // Forward.
    let (mut seen, mut after): (Vec<String>, Option<String>) = (Vec::new(), None);
    loop {
        let cursor = after
            .as_ref()
            .map(|c| format!(", after: \"{c}\""))
            .unwrap_or_default();
        let p = page(app, token, list, &format!("first: 2{cursor}{order}")).await;
        seen.extend(p.ids.iter().cloned());
        assert_eq!(p.has_previous, after.is_some(), "{what}: forward {p:?}");
        assert_eq!(p.has_next, seen.len() < n, "{what}: forward {p:?}");
        if !p.has_next {
            let end = p.end.clone();
            // Past the end: an empty page with nothing after it.
            let past = page(
                app,
                token,
                list,
                &format!("first: 2, after: \"{}\"{order}", end.as_deref().unwrap()),
            )
            .await;
            assert!(past.ids.is_empty() && !past.has_next, "{what}: {past:?}");
            break;
        }
        after = p.end;
    }
    assert_eq!(seen, expected, "{what}: forward");

    // Back from the end.
    let (mut seen, mut before): (Vec<String>, Option<String>) = (Vec::new(), None);
    let first_cursor = loop {
        let cursor = before
            .as_ref()
            .map(|c| format!(", before: \"{c}\""))
            .unwrap_or_default();
        let p = page(app, token, list, &format!("last: 2{cursor}{order}")).await;
        let mut ids = p.ids.clone();
        ids.extend(seen);
        seen = ids;
        assert_eq!(p.has_next, before.is_some(), "{what}: back {p:?}");
        assert_eq!(p.has_previous, seen.len() < n, "{what}: back {p:?}");
        if !p.has_previous {
            break p.start;
        }
        before = p.start;
    };
    assert_eq!(seen, expected, "{what}: back");
    // Before the first row: an empty page with nothing before it.
    let past = page(
        app,
        token,
        list,
        &format!(
            "last: 2, before: \"{}\"{order}",
            first_cursor.as_deref().unwrap()
        ),
    )
    .await;
    assert_eq!(
        (past.ids.len(), past.has_previous, past.has_next),
        (0, false, true),
        "{what}"
    );

    // `before` alone is the page just before the cursor; both cursors
    // bound the page from both sides.
    let all = page(app, token, list, &format!("first: 100{order}")).await;
    let cursors = cursors(app, token, list, &order).await;
    assert_eq!(all.ids, expected, "{what}: one page");
    let p = page(
        app,
        token,
        list,
        &format!("before: \"{}\"{order}", cursors[n - 1]),
    )
    .await;
    assert_eq!(p.ids, expected[..n - 1], "{what}: before alone");
    let p = page(
        app,
        token,
        list,
        &format!(
            "after: \"{}\", before: \"{}\"{order}",
            cursors[0],
            cursors[n - 1]
        ),
    )
    .await;
    assert_eq!(p.ids, expected[1..n - 1], "{what}: between");
}

/// Every edge's cursor of `list` in `order`.
async fn cursors(app: &TestApp, token: &str, list: &List, order: &str) -> Vec<String> {
    let query = format!(
        "{{ {open}first: 100{order}) {{ edges {{ cursor }} }} {close} }}",
        open = list.open,
        close = list.close,
    );
    let res = app.graphql(Some(token), &query, json!({})).await;
    let mut at = res.data();
    for key in &list.path {
        at = &at[*key];
    }
    at["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["cursor"].as_str().unwrap().to_owned())
        .collect()
}

/// `list` in both orders (oldest first is also what no `orderBy` gives),
/// or in its one order.
pub async fn walk_every_order(app: &TestApp, token: &str, list: &List, oldest_first: &[String]) {
    walk(app, token, list, "", oldest_first).await;
    if list.ordered {
        walk(app, token, list, "CREATED_AT_ASC", oldest_first).await;
        let newest_first: Vec<String> = oldest_first.iter().rev().cloned().collect();
        walk(app, token, list, "CREATED_AT_DESC", &newest_first).await;
    }
}

fn id_at(res: &crate::helpers::Gql, path: &[&str]) -> String {
    let mut at: &Value = res.data();
    for key in path {
        at = &at[*key];
    }
    at.as_str().expect("an id").to_owned()
}

/// Facts with no word in common, so none merges into another.
const FACTS: [&str; 5] = [
    "zebra crossing",
    "quantum biscuit",
    "violet harbour",
    "granite owl",
    "saffron engine",
];

async fn every_connection_pages_both_ways_in_each_order(backend: Backend) {
    let app = unlimited(backend).await;
    app.create_tenant("acme").await;
    let token = app.admin_token("acme");
    let gql = |query: &'static str, variables: Value| {
        let token = token.clone();
        let app = &app;
        async move { app.graphql(Some(&token), query, variables).await }
    };

    let conversation = id_at(
        &gql(
            "mutation { startConversation(input: {title: \"t\"}) { conversation { id } } }",
            json!({}),
        )
        .await,
        &["startConversation", "conversation", "id"],
    );
    let (mut tasks, mut keys, mut memories, mut entities, mut plans, mut conversations) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        vec![conversation.clone()],
    );
    for (i, fact) in FACTS.iter().enumerate() {
        let res = gql(
            "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }",
            json!({"input": {"input": format!("turn {i}"), "conversationId": conversation}}),
        )
        .await;
        tasks.push(id_at(&res, &["startTask", "task", "id"]));
        keys.push(app.create_api_key("acme", &["tasks:read"]).await.0);
        let res = gql(
            "mutation($c: String!) { remember(input: {content: $c}) { memory { id } merged } }",
            json!({"c": fact}),
        )
        .await;
        assert_eq!(res.data()["remember"]["merged"], false);
        memories.push(id_at(&res, &["remember", "memory", "id"]));
        let res = gql(
            "mutation($n: String!) { upsertEntity(input: {type: \"customer\", name: $n}) { entity { id } } }",
            json!({"n": format!("customer {i}")}),
        )
        .await;
        entities.push(id_at(&res, &["upsertEntity", "entity", "id"]));
        let res = app
            .publish_plan(
                "acme",
                json!({"key": format!("p{i}"), "intent": format!("t.p{i}"), "steps": [
                    {"id": "a", "tool": "set_state", "args": {"a": 1}}
                ]}),
            )
            .await;
        plans.push(id_at(&res, &["publishPlan", "plan", "id"]));
        if i < 3 {
            let res = gql(
                "mutation { startConversation(input: {title: \"more\"}) { conversation { id } } }",
                json!({}),
            )
            .await;
            conversations.push(id_at(&res, &["startConversation", "conversation", "id"]));
        }
    }

    walk_every_order(&app, &token, &List::top("tasks", true), &tasks).await;
    walk_every_order(&app, &token, &List::top("apiKeys", false), &keys).await;
    walk_every_order(&app, &token, &List::top("memories", true), &memories).await;
    walk_every_order(&app, &token, &List::top("entities", true), &entities).await;
    walk_every_order(&app, &token, &List::top("plans", false), &plans).await;
    walk_every_order(
        &app,
        &token,
        &List::top("conversations", true),
        &conversations,
    )
    .await;
    let turns = List {
        name: "turns",
        open: format!("conversation(id: \"{conversation}\") {{ turns("),
        close: "}",
        path: vec!["conversation", "turns"],
        ordered: true,
    };
    walk_every_order(&app, &token, &turns, &tasks).await;
    let audit = List {
        name: "auditLog",
        open: "auditLog(filter: {actionPrefix: \"api_key.create\"}, ".into(),
        close: "",
        path: vec!["auditLog"],
        ordered: true,
    };
    let audited = cursors(&app, &token, &audit, "").await;
    assert_eq!(audited.len(), 5);
    let audit_ids = page(&app, &token, &audit, "first: 100").await.ids;
    walk_every_order(&app, &token, &audit, &audit_ids).await;
    // The audit log's own order is its rows' creation order.
    let newest = page(&app, &token, &audit, "first: 100, orderBy: CREATED_AT_DESC").await;
    assert_eq!(
        newest.ids,
        audit_ids.iter().rev().cloned().collect::<Vec<_>>()
    );
}

async fn bad_page_arguments_are_refused(backend: Backend) {
    let app = unlimited(backend).await;
    app.create_tenant("acme").await;
    let token = app.admin_token("acme");
    for (args, message) in [
        ("first: -1", "`first` must not be negative"),
        ("last: -2", "`last` must not be negative"),
        (
            "first: 2, last: 2",
            "`first` and `last` cannot be used together",
        ),
        ("last: 101", "`last` is 101"),
        ("last: 2, before: \"not a cursor\"", "is not a valid cursor"),
        ("after: \"%%%\"", "is not a valid cursor"),
    ] {
        for list in [
            "tasks",
            "apiKeys",
            "auditLog",
            "memories",
            "entities",
            "conversations",
        ] {
            let res = app
                .graphql(
                    Some(&token),
                    &format!("{{ {list}({args}) {{ edges {{ cursor }} }} }}"),
                    json!({}),
                )
                .await;
            assert_eq!(
                res.error_code(),
                "BAD_USER_INPUT",
                "{list}({args}): {res:?}"
            );
            assert!(
                res.error_message().contains(message),
                "{list}({args}): {}",
                res.error_message()
            );
        }
    }
    // An order that does not exist is the schema's to refuse.
    let res = app
        .graphql(
            Some(&token),
            "{ tasks(orderBy: NEWEST) { edges { cursor } } }",
            json!({}),
        )
        .await;
    assert!(!res.error_message().is_empty(), "{res:?}");
}

/// `reviews` lists the tenant's reviews of every task, by status, in
/// either order, each naming its task; another tenant sees none of them.
async fn reviews_of_every_task_list_in_each_order(backend: Backend) {
    let app = unlimited(backend).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    app.publish_plan(
        "acme",
        json!({"key": "held", "intent": "t.held", "steps": [
            {"id": "hold", "tool": "set_state", "args": {"held": true}, "requiresReview": true}
        ]}),
    )
    .await
    .data();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let task = app
            .start_task(
                "acme",
                json!({"planKey": "held", "input": format!("held {i}")}),
            )
            .await;
        tasks.push(task["id"].as_str().unwrap().to_owned());
    }
    app.run_tasks().await;
    let token = app.admin_token("acme");
    let all = page(&app, &token, &List::top("reviews", true), "first: 100").await;
    assert_eq!(all.ids.len(), 4);
    let res = app
        .graphql(
            Some(&token),
            "{ reviews(first: 100) { nodes { id status createdAt taskId task { id status } } } }",
            json!({}),
        )
        .await;
    let nodes = res.data()["reviews"]["nodes"].as_array().unwrap().clone();
    let mut of_tasks: Vec<&str> = nodes
        .iter()
        .map(|n| n["taskId"].as_str().unwrap())
        .collect();
    of_tasks.sort_unstable();
    let mut started: Vec<&str> = tasks.iter().map(String::as_str).collect();
    started.sort_unstable();
    assert_eq!(of_tasks, started);
    for node in &nodes {
        assert_eq!(node["status"], "PENDING");
        assert_eq!(node["task"]["id"], node["taskId"]);
        assert_eq!(node["task"]["status"], "NEEDS_REVIEW");
    }
    walk_every_order(&app, &token, &List::top("reviews", true), &all.ids).await;

    // Decide one: it leaves the pending ones and is the approved one.
    let decided = &nodes[1];
    app.graphql(
        Some(&token),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { id } } }",
        json!({"t": decided["taskId"], "r": decided["id"]}),
    )
    .await
    .data();
    let pending = List {
        name: "pending reviews",
        open: "reviews(filter: {statuses: [PENDING]}, ".into(),
        close: "",
        path: vec!["reviews"],
        ordered: true,
    };
    let rest: Vec<String> = all
        .ids
        .iter()
        .filter(|id| **id != decided["id"])
        .cloned()
        .collect();
    walk_every_order(&app, &token, &pending, &rest).await;
    let approved = page(
        &app,
        &token,
        &List {
            open: "reviews(filter: {statuses: [APPROVED]}, ".into(),
            ..List::top("reviews", true)
        },
        "last: 5, orderBy: CREATED_AT_DESC",
    )
    .await;
    assert_eq!(approved.ids, [decided["id"].as_str().unwrap()]);

    let theirs = page(
        &app,
        &app.admin_token("globex"),
        &List::top("reviews", true),
        "last: 100",
    )
    .await;
    assert!(theirs.ids.is_empty(), "{theirs:?}");
}

/// A task's `children` page like `tasks` (they are the same page, of one
/// parent), and the platform's `tenants` both ways.
async fn children_and_tenants_page_both_ways(backend: Backend) {
    let app = unlimited(backend).await;
    for slug in ["acme", "globex", "initech"] {
        app.create_tenant(slug).await;
    }
    app.publish_plan(
        "acme",
        json!({"key": "child", "intent": "t.child", "steps": [
            {"id": "work", "tool": "set_state", "args": {"done": true}}
        ]}),
    )
    .await
    .data();
    let spawn = |id: &str| json!({"id": id, "tool": "spawn_task", "args": {"plan_key": "child", "input": id}});
    app.publish_plan(
        "acme",
        json!({"key": "parent", "intent": "t.parent",
               "steps": [spawn("one"), spawn("two"), spawn("three"), spawn("four")]}),
    )
    .await
    .data();
    let parent = app.start_task("acme", json!({"planKey": "parent"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Another parent's children are not this one's.
    app.start_task("acme", json!({"planKey": "parent"})).await;
    app.run_tasks().await;
    let token = app.admin_token("acme");
    let children = List {
        name: "children",
        open: format!("task(id: \"{parent}\") {{ children("),
        close: "}",
        path: vec!["task", "children"],
        ordered: true,
    };
    let all = page(&app, &token, &children, "first: 100").await;
    assert_eq!(all.ids.len(), 4);
    let of_plan = page(
        &app,
        &token,
        &List {
            open: "tasks(filter: {planKey: \"child\"}, ".into(),
            ..List::top("tasks", true)
        },
        "first: 100",
    )
    .await;
    assert_eq!(of_plan.ids.len(), 8);
    assert!(
        all.ids.iter().all(|id| of_plan.ids.contains(id)),
        "{all:?} {of_plan:?}"
    );
    walk_every_order(&app, &token, &children, &all.ids).await;

    let admin = app.platform_admin_token();
    let tenants = List::top("tenants", false);
    let every = page(&app, &admin, &tenants, "first: 100").await;
    assert!(every.ids.len() >= 3, "{every:?}");
    walk_every_order(&app, &admin, &tenants, &every.ids).await;
}

/// A client that sends every paging variable, the unused ones null (as a
/// console or codegen client does), pages exactly as one that leaves them
/// out: the last page forward says nothing follows.
async fn null_page_arguments_count_as_absent(backend: Backend) {
    let app = unlimited(backend).await;
    app.create_tenant("acme").await;
    for i in 0..4 {
        app.start_task("acme", json!({"input": format!("t{i}")}))
            .await;
    }
    let query = "query($filter: TaskFilter, $first: Int, $after: String, $last: Int, $before: String) { \
        tasks(first: $first, after: $after, last: $last, before: $before, filter: $filter, orderBy: CREATED_AT_DESC) { \
        edges { node { id status intent channel input createdAt updatedAt plan { key version } } } \
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";
    let token = app.admin_token("acme");
    let read = |after: Value| {
        let app = &app;
        let token = &token;
        async move {
            app.graphql(
                Some(token),
                query,
                json!({"filter": null, "first": 2, "after": after, "last": null, "before": null}),
            )
            .await
            .data()["tasks"]
                .clone()
        }
    };
    let first = read(Value::Null).await;
    assert_eq!(first["pageInfo"]["hasNextPage"], true, "{first}");
    let second = read(first["pageInfo"]["endCursor"].clone()).await;
    let inputs: Vec<&str> = second["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["input"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["t1", "t0"]);
    assert_eq!(second["pageInfo"]["hasNextPage"], false, "{second}");
}
