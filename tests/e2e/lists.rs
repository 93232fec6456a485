//! Lists a dashboard can use: every connection pages both ways
//! (`first/after`, `last/before`) with exact `pageInfo` on the side a page
//! is read from, and the lists a dashboard shows newest first take
//! `orderBy`, whose cursors continue a request in the same order.

use serde_json::{Value, json};

use crate::{helpers::TestApp, on_both_backends};

on_both_backends!(
    every_connection_pages_both_ways_in_each_order,
    bad_page_arguments_are_refused,
);

/// A connection to walk: the query text around its arguments and where its
/// connection sits in the answer.
struct List {
    name: &'static str,
    /// The query up to the connection's arguments, e.g. `tasks(`.
    open: String,
    /// What closes the query after the connection's selection.
    close: &'static str,
    path: Vec<&'static str>,
    /// Whether it takes `orderBy`.
    ordered: bool,
}

impl List {
    fn top(name: &'static str, ordered: bool) -> Self {
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
async fn page(app: &TestApp, token: &str, list: &List, args: &str) -> Page {
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
async fn walk(app: &TestApp, token: &str, list: &List, order_by: &str, expected: &[String]) {
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
async fn walk_every_order(app: &TestApp, token: &str, list: &List, oldest_first: &[String]) {
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

async fn every_connection_pages_both_ways_in_each_order(app: TestApp) {
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

async fn bad_page_arguments_are_refused(app: TestApp) {
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
