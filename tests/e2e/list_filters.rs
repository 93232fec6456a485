//! Task filters on `tasks`: by status, plan key, channel, conversation,
//! created and updated range and a text match on the input, alone and
//! together, paged both ways in each order; never another tenant's rows;
//! refused when they cannot be meant. The one-pass page and the general
//! path give the same answer under every order, direction and filter.

use chrono::{DateTime, FixedOffset};
use serde_json::{Value, json};

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
    lists::{List, page, unlimited, walk_every_order},
};

for_both_backends!(
    each_task_filter_pages_both_ways_in_each_order,
    bad_task_filters_are_refused,
    plain_and_general_pages_agree_under_each_order_and_filter,
);

/// Inputs of acme's tasks, in creation order: mixed case and LIKE's
/// wildcards, which must match only themselves.
const INPUTS: [&str; 12] = [
    "Refund order 1",
    "invoice 2",
    "REFUND now",
    "50% off",
    "refund_request",
    "ship it",
    "Ref und",
    "another Refund",
    "100% sure",
    "nothing",
    "refundable",
    "x_y",
];

const TASK: &str = "id status channel input conversationId createdAt updatedAt plan { key }";

/// Acme's twelve tasks (see [`seed`]) as the API shows them, oldest first.
async fn all_tasks(app: &TestApp, token: &str) -> Vec<Value> {
    let res = app
        .graphql(
            Some(token),
            &format!("{{ tasks(first: 100) {{ nodes {{ {TASK} }} }} }}"),
            json!({}),
        )
        .await;
    res.data()["tasks"]["nodes"].as_array().unwrap().clone()
}

fn at(task: &Value, field: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(task[field].as_str().unwrap()).unwrap()
}

/// Acme: eight tasks run (plans `alpha`, which completes, and `broken`,
/// which fails, in turn), then four of `alpha` left pending; even ones on
/// the API channel, odd ones on the web; every third a turn of one
/// conversation. Globex: tasks that would pass every filter acme's tests
/// use, if filters leaked across tenants. Returns acme's conversation.
async fn seed(app: &TestApp) -> String {
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    for tenant in ["acme", "globex"] {
        app.publish_plan(
            tenant,
            json!({"key": "alpha", "intent": "t.alpha", "steps": [
                {"id": "a", "tool": "set_state", "args": {"a": 1}}
            ]}),
        )
        .await
        .data();
        app.publish_broken_plan(tenant).await;
    }
    let token = app.admin_token("acme");
    let conversation = app.start_conversation(&token, "c").await;
    for (i, input) in INPUTS.iter().enumerate() {
        if i == 8 {
            app.run_tasks().await;
        }
        let mut task = json!({
            "input": input,
            "planKey": if i < 8 && i % 2 == 1 { "broken" } else { "alpha" },
            "channel": if i % 2 == 0 { "API" } else { "WEB" },
        });
        if i % 3 == 0 {
            task["conversationId"] = json!(conversation);
        }
        app.start_task("acme", task).await;
    }
    for input in ["Refund globex", "50% globex", "x_y globex"] {
        app.start_task(
            "globex",
            json!({"input": input, "planKey": "alpha", "channel": "API"}),
        )
        .await;
    }
    conversation
}

/// Whether a task (as [`all_tasks`] shows it) passes a filter.
type Passes = Box<dyn Fn(&Value) -> bool>;

/// The ids `filter` lists, first: 100, in `order`.
async fn listed(app: &TestApp, token: &str, filter: &str, order: &str) -> Vec<String> {
    let res = app
        .graphql(
            Some(token),
            &format!(
                "{{ tasks(filter: {filter}, first: 100, orderBy: {order}) {{ nodes {{ id }} }} }}"
            ),
            json!({}),
        )
        .await;
    res.data()["tasks"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn each_task_filter_pages_both_ways_in_each_order(backend: Backend) {
    let app = unlimited(backend).await;
    let conversation = seed(&app).await;
    let token = app.admin_token("acme");
    let tasks = all_tasks(&app, &token).await;
    assert_eq!(tasks.len(), INPUTS.len());
    let statuses: Vec<&str> = tasks
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "COMPLETED",
            "FAILED",
            "COMPLETED",
            "FAILED",
            "COMPLETED",
            "FAILED",
            "COMPLETED",
            "FAILED",
            "PENDING",
            "PENDING",
            "PENDING",
            "PENDING"
        ]
    );
    // Instants between the tasks: task 3's and 9's creation; task 8's
    // update, which is its creation: the eight run tasks were last updated
    // before it was started, the pending ones at or after.
    let (c3, c9, u8) = (
        tasks[3]["createdAt"].as_str().unwrap(),
        tasks[9]["createdAt"].as_str().unwrap(),
        tasks[8]["updatedAt"].as_str().unwrap(),
    );
    let (c3t, c9t, u8t) = (
        at(&tasks[3], "createdAt"),
        at(&tasks[9], "createdAt"),
        at(&tasks[8], "updatedAt"),
    );
    let cases: Vec<(String, Passes)> = vec![
        (
            "{statuses: [FAILED]}".into(),
            Box::new(|t| t["status"] == "FAILED"),
        ),
        (
            "{statuses: [FAILED, PENDING]}".into(),
            Box::new(|t| t["status"] == "FAILED" || t["status"] == "PENDING"),
        ),
        (
            "{planKey: \"alpha\"}".into(),
            Box::new(|t| t["plan"]["key"] == "alpha"),
        ),
        ("{channel: API}".into(), Box::new(|t| t["channel"] == "API")),
        (
            format!("{{conversationId: \"{conversation}\"}}"),
            Box::new(|t| t["conversationId"].is_string()),
        ),
        (
            "{inputContains: \"rEfUnD\"}".into(),
            Box::new(|t| {
                t["input"]
                    .as_str()
                    .unwrap()
                    .to_lowercase()
                    .contains("refund")
            }),
        ),
        (
            "{inputContains: \"%\"}".into(),
            Box::new(|t| t["input"].as_str().unwrap().contains('%')),
        ),
        (
            "{inputContains: \"_\"}".into(),
            Box::new(|t| t["input"].as_str().unwrap().contains('_')),
        ),
        (
            format!("{{createdAfter: \"{c3}\", createdBefore: \"{c9}\"}}"),
            Box::new(move |t| at(t, "createdAt") >= c3t && at(t, "createdAt") < c9t),
        ),
        (
            format!("{{updatedAfter: \"{u8}\"}}"),
            Box::new(move |t| at(t, "updatedAt") >= u8t),
        ),
        (
            format!("{{updatedBefore: \"{u8}\"}}"),
            Box::new(move |t| at(t, "updatedAt") < u8t),
        ),
        (
            format!(
                "{{planKey: \"alpha\", statuses: [COMPLETED, PENDING], channel: API, \
                 inputContains: \"refund\", createdAfter: \"{c3}\"}}"
            ),
            Box::new(move |t| {
                t["plan"]["key"] == "alpha"
                    && (t["status"] == "COMPLETED" || t["status"] == "PENDING")
                    && t["channel"] == "API"
                    && t["input"]
                        .as_str()
                        .unwrap()
                        .to_lowercase()
                        .contains("refund")
                    && at(t, "createdAt") >= c3t
            }),
        ),
    ];
    let globex = app.admin_token("globex");
    for (filter, passes) in &cases {
        let expected: Vec<String> = tasks
            .iter()
            .filter(|t| passes(t))
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect();
        assert!(!expected.is_empty(), "{filter} selects something");
        assert!(
            expected.len() < tasks.len(),
            "{filter} leaves something out"
        );
        assert_eq!(
            listed(&app, &token, filter, "CREATED_AT_ASC").await,
            expected,
            "{filter}"
        );
        let newest: Vec<String> = expected.iter().rev().cloned().collect();
        assert_eq!(
            listed(&app, &token, filter, "CREATED_AT_DESC").await,
            newest,
            "{filter}"
        );
        if expected.len() >= 3 {
            let list = List {
                name: "tasks",
                open: format!("tasks(filter: {filter}, "),
                close: "",
                path: vec!["tasks"],
                ordered: true,
            };
            walk_every_order(&app, &token, &list, &expected).await;
        }
        // Globex sees none of acme's tasks through the same filter.
        let theirs = listed(&app, &globex, filter, "CREATED_AT_ASC").await;
        assert!(
            theirs
                .iter()
                .all(|id| !tasks.iter().any(|t| t["id"] == id.as_str())),
            "{filter}: {theirs:?}"
        );
    }
    // Globex's own tasks pass its filters, and acme's conversation holds
    // none of them.
    assert_eq!(
        listed(
            &app,
            &globex,
            "{inputContains: \"REFUND\"}",
            "CREATED_AT_ASC"
        )
        .await
        .len(),
        1
    );
    assert!(
        listed(
            &app,
            &globex,
            &format!("{{conversationId: \"{conversation}\"}}"),
            "CREATED_AT_ASC"
        )
        .await
        .is_empty()
    );
}

async fn bad_task_filters_are_refused(backend: Backend) {
    let app = unlimited(backend).await;
    app.create_tenant("acme").await;
    let token = app.admin_token("acme");
    let task = app.start_task("acme", json!({"input": "x"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let long = "x".repeat(201);
    for (filter, message) in [
        (
            "{createdAfter: \"2026-01-02T00:00:00Z\", createdBefore: \"2026-01-01T00:00:00Z\"}"
                .to_owned(),
            "`createdAfter`",
        ),
        (
            "{updatedAfter: \"2026-01-02T00:00:00Z\", updatedBefore: \"2026-01-01T00:00:00Z\"}"
                .to_owned(),
            "`updatedAfter`",
        ),
        (format!("{{inputContains: \"{long}\"}}"), "at most 200"),
        (
            format!("{{conversationId: \"{task}\"}}"),
            "is not an id of a Conversation",
        ),
    ] {
        let res = app
            .graphql(
                Some(&token),
                &format!("{{ tasks(filter: {filter}, last: 5) {{ nodes {{ id }} }} }}"),
                json!({}),
            )
            .await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{filter}: {res:?}");
        assert!(res.error_message().contains(message), "{filter}: {res:?}");
    }
    // An empty range (after = before) is a question with no answer, not an
    // error; an empty text matches everything.
    let res = app
        .graphql(
            Some(&token),
            "{ tasks(filter: {createdAfter: \"2026-01-01T00:00:00Z\", createdBefore: \"2026-01-01T00:00:00Z\"}) { nodes { id } } \
               all: tasks(filter: {inputContains: \"\"}) { nodes { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(res.data()["tasks"]["nodes"], json!([]));
    assert_eq!(res.data()["all"]["nodes"].as_array().unwrap().len(), 1);
}

/// A plain selection takes the one-pass path; the same fields in an
/// inline fragment take the general path (reading the page with its steps
/// and events in one statement), and beside a task's JSON and `reviews`
/// the general path's full read. All give the same pages, both ways,
/// under each order and filter.
async fn plain_and_general_pages_agree_under_each_order_and_filter(backend: Backend) {
    let app = unlimited(backend).await;
    let conversation = seed(&app).await;
    let token = app.admin_token("acme");
    const FIELDS: &str = "__typename id status channel input plan { key } createdAt \
        steps { stepId status } events(last: 2) { seq kind }";
    let filters = [
        "{}".to_owned(),
        "{statuses: [FAILED, PENDING]}".into(),
        "{planKey: \"alpha\", channel: API}".into(),
        format!("{{conversationId: \"{conversation}\"}}"),
        "{inputContains: \"REFUND\"}".into(),
    ];
    for filter in &filters {
        for order in ["CREATED_AT_ASC", "CREATED_AT_DESC"] {
            let list = List {
                name: "tasks",
                open: format!("tasks(filter: {filter}, orderBy: {order}, "),
                close: "",
                path: vec!["tasks"],
                ordered: true,
            };
            let query = |node: &str, args: &str| {
                format!(
                    "{{ tasks(filter: {filter}, orderBy: {order}, {args}) {{ __typename \
                     pageInfo {{ hasPreviousPage hasNextPage startCursor endCursor }} \
                     edges {{ cursor node {{ {node} }} }} }} }}"
                )
            };
            // A cursor inside the list, to page from both ways.
            let first = page(&app, &token, &list, "first: 2").await;
            let middle = first.end.clone().unwrap();
            for args in [
                "first: 2".to_owned(),
                format!("first: 2, after: \"{middle}\""),
                "last: 2".to_owned(),
                format!("last: 2, before: \"{middle}\""),
                format!("before: \"{middle}\""),
            ] {
                let plain = app
                    .graphql(Some(&token), &query(FIELDS, &args), json!({}))
                    .await;
                let fragment = app
                    .graphql(
                        Some(&token),
                        &query(&format!("... on Task {{ {FIELDS} }}"), &args),
                        json!({}),
                    )
                    .await;
                // A task's JSON (`state`) makes the page a full read
                // (`Tasks::list`), its relations batches of their own.
                let whole = app
                    .graphql(
                        Some(&token),
                        &query(&format!("{FIELDS} state reviews {{ id }}"), &args),
                        json!({}),
                    )
                    .await;
                let what = format!("{filter} {order} {args}");
                assert_eq!(plain.data(), fragment.data(), "{what}");
                let mut general = whole.data().clone();
                for edge in general["tasks"]["edges"].as_array_mut().unwrap() {
                    let node = edge["node"].as_object_mut().unwrap();
                    node.remove("state");
                    node.remove("reviews");
                }
                assert_eq!(plain.data(), &general, "{what}");
            }
        }
    }
}
