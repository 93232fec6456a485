//! DataLoader batching: a list's relations cost a fixed number of SQL
//! statements, however long the list. Statements are counted by the
//! server itself (`brainstem_db_statements_total` on `/metrics`).

use serde_json::{Value, json};

use crate::{
    capabilities::{CAPABILITY_FIELDS, publish_capability, quotes_capability},
    for_both_backends,
    helpers::{Backend, TestApp},
};

for_both_backends!(
    listing_tasks_runs_the_same_statements_for_10_and_50_tasks,
    listing_capabilities_batches_their_plans_and_tools,
    a_tokens_tenant_is_looked_up_once,
    a_page_reads_steps_and_events_as_far_as_it_shows_them,
    a_list_of_conversations_reads_every_ones_turns_in_one_statement,
    a_page_of_tasks_reads_every_ones_children_in_one_statement,
);

/// The default configuration: list resolvers prefetch what their items
/// select, so batches do not depend on how fast this debug build resolves
/// a page.
async fn app(backend: Backend) -> TestApp {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    app
}

/// The server's count of SQL statements so far (read in process: a scrape
/// of `/metrics` sends a statement of its own, the queue depth).
async fn statements(app: &TestApp) -> u64 {
    app.domain.statements.get()
}

/// Run `query` as acme's admin; return the data and the statements it took
/// (the token's tenant is looked up before, see
/// [`a_tokens_tenant_is_looked_up_once`]).
async fn measured(app: &TestApp, query: &str) -> (Value, u64) {
    measured_with(app, query, json!({})).await
}

/// [`measured`] with `variables`.
async fn measured_with(app: &TestApp, query: &str, variables: Value) -> (Value, u64) {
    let token = app.admin_token("acme");
    app.graphql(Some(&token), "{ __typename }", json!({}))
        .await
        .data();
    let before = statements(app).await;
    let res = app.graphql(Some(&token), query, variables).await;
    let after = statements(app).await;
    (res.data().clone(), after - before)
}

const TASKS_QUERY: &str = "{ tasks(first: 100) { edges { node { \
    id status plan { key version } \
    steps { stepId status attempt } \
    events(last: 5) { seq kind stepId } \
    reviews { id } pendingReview { id } artifacts { kind } parent { id } \
} } } }";

/// Acme's plan `three`: three `set_state` steps (`a`, `b`, `c`).
async fn publish_three(app: &TestApp) {
    app.publish_plan(
        "acme",
        json!({"key": "three", "intent": "t.three", "steps": [
            {"id": "a", "tool": "set_state", "args": {"a": 1}},
            {"id": "b", "tool": "set_state", "args": {"b": 2}},
            {"id": "c", "tool": "set_state", "args": {"c": 3}},
        ]}),
    )
    .await
    .data();
}

/// Acme's plan `broken` (one call to a port nothing listens on, tried
/// once), started and run: a failed task with a failed step.
async fn run_a_broken_task(app: &TestApp) {
    app.publish_broken_plan("acme").await;
    app.start_task("acme", json!({"planKey": "broken"})).await;
    app.run_tasks().await;
}

async fn start_and_run(app: &TestApp, n: usize) {
    for i in 0..n {
        app.start_task(
            "acme",
            json!({"planKey": "three", "idempotencyKey": format!("t-{i}-{n}")}),
        )
        .await;
    }
    app.run_tasks().await;
}

async fn listing_tasks_runs_the_same_statements_for_10_and_50_tasks(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    start_and_run(&app, 10).await;
    let (ten, with_10) = measured(&app, TASKS_QUERY).await;
    start_and_run(&app, 40).await;
    let (fifty, with_50) = measured(&app, TASKS_QUERY).await;

    let edges = fifty["tasks"]["edges"].as_array().unwrap();
    assert_eq!(ten["tasks"]["edges"].as_array().unwrap().len(), 10);
    assert_eq!(edges.len(), 50);
    for edge in edges {
        let task = &edge["node"];
        assert_eq!(task["status"], "COMPLETED", "{task}");
        assert_eq!(task["steps"].as_array().unwrap().len(), 3);
        // The last five events, oldest first, ending with the completion.
        let events = task["events"].as_array().unwrap();
        assert_eq!(events.len(), 5, "{task}");
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        assert_eq!(events[4]["kind"], "STATUS_CHANGED");
        assert_eq!(events[3]["stepId"], "c");
    }
    // Batching: one statement per relation, whatever the number of tasks.
    assert_eq!(
        with_10, with_50,
        "statements for 10 tasks vs 50 tasks: {with_10} vs {with_50}"
    );
    assert!(with_50 <= 10, "{with_50} statements for one list");
}

/// Starts `n` more conversations of acme's admin, each with four turns
/// (`c<i> t<j>`) on plan `three`, and runs them.
async fn start_conversations(app: &TestApp, from: usize, n: usize) {
    let token = app.admin_token("acme");
    for c in from..from + n {
        let id = app.start_conversation(&token, "c").await;
        for t in 0..4 {
            app.start_task(
                "acme",
                json!({"planKey": "three", "conversationId": id, "input": format!("c{c} t{t}")}),
            )
            .await;
        }
    }
    app.run_tasks().await;
}

/// The turns of a page of conversations (each its own page: the last two,
/// or the newest two) are one statement for all of them, and each
/// conversation's page is the one it answers alone.
async fn a_list_of_conversations_reads_every_ones_turns_in_one_statement(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    let list = |turns: &str| {
        format!(
            "{{ conversations(first: 20) {{ edges {{ node {{ id turns({turns}) {{ \
             edges {{ node {{ input status }} }} pageInfo {{ hasPreviousPage hasNextPage }} }} }} }} }} }}"
        )
    };
    let inputs = |conversation: &Value| -> Vec<String> {
        conversation["turns"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["node"]["input"].as_str().unwrap().to_owned())
            .collect()
    };
    start_conversations(&app, 0, 3).await;
    let (three, with_3) = measured(&app, &list("last: 2")).await;
    start_conversations(&app, 3, 9).await;
    let (twelve, with_12) = measured(&app, &list("last: 2")).await;
    assert_eq!(three["conversations"]["edges"].as_array().unwrap().len(), 3);
    let conversations = twelve["conversations"]["edges"].as_array().unwrap();
    assert_eq!(conversations.len(), 12);
    for (c, edge) in conversations.iter().enumerate() {
        let node = &edge["node"];
        assert_eq!(inputs(node), [format!("c{c} t2"), format!("c{c} t3")]);
        assert_eq!(node["turns"]["pageInfo"]["hasPreviousPage"], true, "{node}");
        // Alone, the conversation answers the same page.
        let alone = app
            .graphql(
                Some(&app.admin_token("acme")),
                "query($id: ID!) { conversation(id: $id) { id turns(last: 2) { \
                 edges { node { input status } } pageInfo { hasPreviousPage hasNextPage } } } }",
                json!({"id": node["id"]}),
            )
            .await;
        assert_eq!(&alone.data()["conversation"], node);
    }
    assert_eq!(
        with_3, with_12,
        "statements for 3 conversations vs 12: {with_3} vs {with_12}"
    );
    let (newest, with_newest) = measured(&app, &list("first: 2, orderBy: CREATED_AT_DESC")).await;
    assert_eq!(with_newest, with_12);
    for (c, edge) in newest["conversations"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        assert_eq!(
            inputs(&edge["node"]),
            [format!("c{c} t3"), format!("c{c} t2")]
        );
        assert_eq!(edge["node"]["turns"]["pageInfo"]["hasNextPage"], true);
    }
}

/// A page of parents, each with its first two children: one statement
/// for all their children, each parent's page its own.
async fn a_page_of_tasks_reads_every_ones_children_in_one_statement(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    publish_parent(&app).await;
    let parents = |n: usize| {
        let app = &app;
        async move {
            for _ in 0..n {
                app.start_task("acme", json!({"planKey": "parent"})).await;
            }
            app.run_tasks().await;
        }
    };
    let query = "{ tasks(filter: {planKey: \"parent\"}, first: 20) { edges { node { id \
        children(first: 2) { edges { node { input parent { id } } } pageInfo { hasNextPage } } } } } }";
    parents(2).await;
    let (_, with_2) = measured(&app, query).await;
    parents(4).await;
    let (six, with_6) = measured(&app, query).await;
    let edges = six["tasks"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 6);
    for edge in edges {
        let children = edge["node"]["children"]["edges"].as_array().unwrap();
        let inputs: Vec<&str> = children
            .iter()
            .map(|c| c["node"]["input"].as_str().unwrap())
            .collect();
        assert_eq!(inputs, ["one", "two"], "{edge}");
        assert!(
            children
                .iter()
                .all(|c| c["node"]["parent"]["id"] == edge["node"]["id"])
        );
        assert_eq!(edge["node"]["children"]["pageInfo"]["hasNextPage"], true);
    }
    assert_eq!(
        with_2, with_6,
        "statements for 2 parents vs 6: {with_2} vs {with_6}"
    );
}

async fn listing_capabilities_batches_their_plans_and_tools(backend: Backend) {
    let app = app(backend).await;
    let query =
        format!("{{ capabilities(first: 50) {{ edges {{ node {{ {CAPABILITY_FIELDS} }} }} }} }}");
    let publish = |n: usize| {
        let mut def = quotes_capability();
        def["key"] = json!(format!("cap.{n}"));
        def["plans"][0]["key"] = json!(format!("cap.{n}.plan"));
        def["tools"] = json!([{"key": format!("partner.cap{n}"), "url": "http://127.0.0.1:9/x"}]);
        def
    };
    for n in 0..3 {
        publish_capability(&app, publish(n)).await.data();
    }
    let (three, with_3) = measured(&app, &query).await;
    for n in 3..12 {
        publish_capability(&app, publish(n)).await.data();
    }
    let (twelve, with_12) = measured(&app, &query).await;
    assert_eq!(three["capabilities"]["edges"].as_array().unwrap().len(), 3);
    let edges = twelve["capabilities"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 12);
    for (n, edge) in edges.iter().enumerate() {
        let c = &edge["node"];
        assert_eq!(c["plans"][0]["key"], format!("cap.{n}.plan"));
        assert_eq!(c["tools"][0]["key"], format!("partner.cap{n}"));
    }
    assert_eq!(with_3, with_12, "{with_3} vs {with_12}");
}

/// A token names its tenant by slug: the first request looks it up, later
/// ones find it resolved (tenants are never renamed or deleted). A tenant
/// created after a token for it failed is found at once.
async fn a_tokens_tenant_is_looked_up_once(backend: Backend) {
    let app = app(backend).await;
    let token = app.admin_token("acme");
    let mut costs = Vec::new();
    for _ in 0..2 {
        let before = statements(&app).await;
        let res = app.graphql(Some(&token), "{ __typename }", json!({})).await;
        assert_eq!(res.data()["__typename"], "Query");
        costs.push(statements(&app).await - before);
    }
    assert_eq!(
        costs,
        [1, 0],
        "the tenant is looked up by the first request only"
    );

    let early = app.admin_token("later");
    let query = "{ viewer { subject } }";
    let refused = app.graphql(Some(&early), query, json!({})).await;
    assert_eq!(refused.error_code(), "UNAUTHENTICATED");
    app.create_tenant("later").await;
    let accepted = app.graphql(Some(&early), query, json!({})).await;
    assert_eq!(accepted.data()["viewer"]["subject"], "tester");
}

/// A page that shows no task, step or event JSON reads summaries of their
/// rows; one that does reads them whole. Both in one query (under
/// aliases), each list is what a single task's read returns; and a page
/// that shows a task's JSON (under `nodes` too) shows all of it.
async fn a_page_reads_steps_and_events_as_far_as_it_shows_them(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    start_and_run(&app, 3).await;
    let (page, _) = measured(
        &app,
        "{ tasks(first: 10) { edges { node { id \
           brief: steps { stepId status } \
           whole: steps { stepId status args output } \
           recent: events(last: 3) { seq summary } \
           detailed: events(last: 3) { seq summary dataKeys data } } } } }",
    )
    .await;
    let edges = page["tasks"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 3);
    let token = app.admin_token("acme");
    for edge in edges {
        let node = &edge["node"];
        let one = app
            .graphql(
                Some(&token),
                "query($id: ID!) { task(id: $id) { \
                   steps { stepId status args output } \
                   events(last: 3) { seq summary dataKeys data } } }",
                json!({"id": node["id"]}),
            )
            .await;
        let one = &one.data()["task"];
        assert_eq!(node["whole"], one["steps"], "{node}");
        assert_eq!(node["detailed"], one["events"], "{node}");
        assert_eq!(node["whole"][0]["args"], json!({"a": 1}), "{node}");
        let brief: Vec<Value> = one["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| json!({"stepId": s["stepId"], "status": s["status"]}))
            .collect();
        assert_eq!(node["brief"], json!(brief), "{node}");
        let recent: Vec<Value> = one["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| json!({"seq": e["seq"], "summary": e["summary"]}))
            .collect();
        assert_eq!(node["recent"], json!(recent), "{node}");
    }
}

for_both_backends!(a_page_that_shows_task_json_reads_it_whole);

async fn a_page_that_shows_task_json_reads_it_whole(backend: Backend) {
    let app = app(backend).await;
    app.publish_plan(
        "acme",
        json!({"key": "one", "intent": "t.one", "steps": [
            {"id": "a", "tool": "set_state", "args": {"a": 1}},
        ]}),
    )
    .await
    .data();
    app.start_task(
        "acme",
        json!({"planKey": "one", "payload": {"order": 7}, "idempotencyKey": "j-1"}),
    )
    .await;
    app.run_tasks().await;
    let fields = "id payload state settledStepIds frozenPlan { id tool } usage { inputTokens }";
    let token = app.admin_token("acme");
    for list in [
        format!("{{ tasks(first: 5) {{ nodes {{ {fields} }} }} }}"),
        format!("{{ tasks(first: 5) {{ edges {{ node {{ {fields} }} }} }} }}"),
        format!(
            "{{ tasks(first: 5) {{ edges {{ node {{ ...T }} }} }} }} fragment T on Task {{ {fields} }}"
        ),
    ] {
        let page = app.graphql(Some(&token), &list, json!({})).await;
        let tasks = &page.data()["tasks"];
        let task = if tasks["nodes"].is_array() {
            tasks["nodes"][0].clone()
        } else {
            tasks["edges"][0]["node"].clone()
        };
        assert_eq!(task["payload"], json!({"order": 7}), "{task}");
        assert_eq!(task["state"]["a"], 1, "{task}");
        assert_eq!(task["settledStepIds"], json!(["a"]), "{task}");
        assert_eq!(task["frozenPlan"][0]["tool"], "set_state", "{task}");
        let one = app
            .graphql(
                Some(&token),
                &format!("query($id: ID!) {{ task(id: $id) {{ {fields} }} }}"),
                json!({"id": task["id"]}),
            )
            .await;
        assert_eq!(task, one.data()["task"], "{list}");
    }
}

for_both_backends!(a_pages_steps_and_events_are_read_in_one_statement);

/// A page showing summaries of its tasks' steps and events reads them with
/// the page in one statement (`tasks/summaries.rs`), and a page that shows
/// a task's JSON reads both relations in one statement after the page.
/// Either way each task's lists are what reading that task alone gives,
/// overlapping windows and windows from the start included.
async fn a_pages_steps_and_events_are_read_in_one_statement(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    start_and_run(&app, 3).await;
    run_a_broken_task(&app).await;

    const STEP: &str = "stepId tool attempt status summary error idempotencyKey \
                        startedAt finishedAt durationMs";
    const EVENT: &str = "seq kind taskId stepId tool status summary error createdAt";
    // Every field a task's summary row holds, then the relations.
    let relations = format!(
        "status mode conversationId channel input subjectId intent confidence \
         confidenceThreshold plan {{ key version }} currentStepId maxSteps error \
         traceId idempotencyKey createdBy createdAt updatedAt startedAt completedAt \
         steps {{ {STEP} }} recent: events(last: 3) {{ {EVENT} }} \
         older: events(last: 6) {{ {EVENT} }} early: events(after: 1, first: 2) {{ {EVENT} }}"
    );
    let page_of =
        |fields: &str| format!("{{ tasks(first: 10) {{ edges {{ node {{ {fields} }} }} }} }}");
    let (page, with_both) = measured(&app, &page_of(&format!("id {relations}"))).await;
    let (_, page_alone) = measured(&app, &page_of("id")).await;
    assert_eq!(
        with_both, page_alone,
        "statements with steps and events and without"
    );
    let (whole, with_json) = measured(&app, &page_of(&format!("id payload {relations}"))).await;
    assert_eq!(
        with_json,
        page_alone + 1,
        "a page with its JSON, then both relations"
    );
    for (edge, whole) in page["tasks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .zip(whole["tasks"]["edges"].as_array().unwrap())
    {
        let mut whole = whole["node"].clone();
        whole.as_object_mut().unwrap().remove("payload");
        assert_eq!(edge["node"], whole);
    }

    let edges = page["tasks"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 4);
    let token = app.admin_token("acme");
    let (mut failed_steps, mut longest_window) = (0, 0);
    for edge in edges {
        let node = &edge["node"];
        let one = app
            .graphql(
                Some(&token),
                &format!("query($id: ID!) {{ task(id: $id) {{ id {relations} }} }}"),
                json!({"id": node["id"]}),
            )
            .await;
        assert_eq!(node, &one.data()["task"]);
        assert!(!node["steps"].as_array().unwrap().is_empty(), "{node}");
        let recent = node["recent"].as_array().unwrap();
        let older = node["older"].as_array().unwrap();
        assert_eq!(recent.len(), older.len().min(3), "{node}");
        assert_eq!(older[older.len() - recent.len()..], recent[..], "{node}");
        longest_window = longest_window.max(older.len());
        let early: Vec<i64> = node["early"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_i64().unwrap())
            .collect();
        assert_eq!(early, [2, 3], "{node}");
        failed_steps += node["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["error"].is_string())
            .count();
    }
    assert_eq!(failed_steps, 1, "{page}");
    assert_eq!(longest_window, 6, "{page}");
    let failed: Vec<&Value> = edges
        .iter()
        .map(|e| &e["node"])
        .filter(|t| t["status"] == "FAILED")
        .collect();
    assert_eq!(failed.len(), 1, "{page}");
    assert!(failed[0]["error"].is_string(), "{page}");
    assert!(
        edges
            .iter()
            .all(|e| e["node"]["plan"]["version"].is_i64() && e["node"]["startedAt"].is_string()),
        "{page}"
    );
}

for_both_backends!(plain_lists_answer_as_the_general_path_does);

/// A task's steps and events resolved in one pass (`schema/plain_list.rs`)
/// answer what async-graphql's general path answers: every plain field is
/// asked for both ways (plainly, and inside an inline fragment, which takes
/// the general path) over finished and failed tasks, and the plain answer
/// keeps the selection's order. The page shows a review too, so that it
/// is resolved the general way and its lists by `PlainList`, not in one
/// pass by `plain_page`.
async fn plain_lists_answer_as_the_general_path_does(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    start_and_run(&app, 2).await;
    run_a_broken_task(&app).await;

    const STEP: &str = "stepId tool attempt status summary error idempotencyKey \
                        startedAt finishedAt durationMs __typename";
    const EVENT: &str = "seq kind taskId stepId tool status summary error createdAt __typename";
    let query = |steps: &str, events: &str| {
        format!(
            "{{ tasks(first: 10) {{ edges {{ node {{ id pendingReview {{ id }} \
             steps {{ {steps} }} events(last: 100) {{ {events} }} }} }} }} }}"
        )
    };
    let token = app.admin_token("acme");
    let plain = app
        .graphql(Some(&token), &query(STEP, EVENT), json!({}))
        .await
        .data()
        .clone();
    let general = app
        .graphql(
            Some(&token),
            &query(
                &format!("... on TaskStep {{ {STEP} }}"),
                &format!("... on TaskEvent {{ {EVENT} }}"),
            ),
            json!({}),
        )
        .await
        .data()
        .clone();
    assert_eq!(plain, general);
    let tasks = plain["tasks"]["edges"].as_array().unwrap();
    assert_eq!(tasks.len(), 3);
    let steps: Vec<&Value> = tasks
        .iter()
        .flat_map(|t| t["node"]["steps"].as_array().unwrap())
        .collect();
    let events: Vec<&Value> = tasks
        .iter()
        .flat_map(|t| t["node"]["events"].as_array().unwrap())
        .collect();
    assert_eq!(steps.len(), 7, "{plain}");
    assert!(
        steps.iter().any(|s| s["error"].is_string()),
        "a failed step"
    );
    assert!(
        events.iter().any(|e| e["error"].is_string()),
        "a failed step's event"
    );
    assert!(
        events.iter().any(|e| e["__typename"] == "StepCompleted")
            && events.iter().any(|e| e["__typename"] == "StatusChanged"),
        "{plain}"
    );

    // Selection order, a repeated key once in its first place.
    let raw = raw_answer(
        &app,
        "{ tasks(first: 1) { edges { node { pendingReview { id } \
         steps { status stepId status } events(last: 1) { summary seq } } } } }",
    )
    .await;
    assert!(raw.contains("\"steps\":[{\"status\":"), "{raw}");
    assert!(
        !raw.contains("\"status\":\"COMPLETED\",\"stepId\":\"a\",\"status\""),
        "{raw}"
    );
    assert!(raw.contains("\"events\":[{\"summary\":"), "{raw}");
}

for_both_backends!(a_plain_page_answers_as_the_general_path_does);

/// A page whose selection is all plain is read narrow and built in one
/// pass (`schema/tasks/plain_page.rs`), however it is written: plainly,
/// through a named fragment (as Relay and Apollo clients write pages) or
/// inline fragments, with the events' window from a variable. The same
/// selection beside a review (not plain) takes the general path. All
/// answer the same, page by page (cursors, page info, type names, every
/// plain field of a task, its plan, steps and event windows), the one-pass
/// ones in the one statement a page of ids takes, and the one-pass answer
/// keeps the selection's order.
async fn a_plain_page_answers_as_the_general_path_does(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    start_and_run(&app, 2).await;
    run_a_broken_task(&app).await;
    let query = |node: &str, after: &Value| {
        let after = after
            .as_str()
            .map(|c| format!(", after: \"{c}\""))
            .unwrap_or_default();
        format!(
            "{{ tasks(first: 2{after}) {{ __typename \
             pageInfo {{ hasPreviousPage hasNextPage startCursor endCursor __typename }} \
             edges {{ __typename cursor node {{ {node} }} }} }} }}"
        )
    };
    let (mut after, mut seen) = (Value::Null, 0);
    let fragment = format!("fragment Row on Task {{ {TASK} }}");
    let spread_in = |written: String| {
        format!("query($early: Int = 1, $n: Int!) {written} {fragment}")
            .replace("after: 1", "after: $early")
            .replace("first: 2)", "first: $n)")
    };
    for page in 0..2 {
        let (plain, plain_statements) = measured(&app, &query(TASK, &after)).await;
        let (mut general, _) = measured(
            &app,
            &query(&format!("{TASK} pendingReview {{ id }}"), &after),
        )
        .await;
        for edge in general["tasks"]["edges"].as_array_mut().unwrap() {
            let review = edge["node"]
                .as_object_mut()
                .unwrap()
                .remove("pendingReview");
            assert_eq!(review, Some(Value::Null), "{edge}");
        }
        let (alone, alone_statements) = measured(&app, &query("id", &after)).await;
        assert_eq!(plain, general, "page {page}");
        assert_eq!(plain_statements, alone_statements, "page {page}");
        for written in [
            query("...Row", &after),
            query("... on Task { id ... on Node { id } } ...Row", &after),
        ] {
            let (spread, spread_statements) =
                measured_with(&app, &spread_in(written.clone()), json!({ "n": 2 })).await;
            assert_eq!(spread, plain, "page {page}: {written}");
            assert_eq!(
                spread_statements, alone_statements,
                "page {page}: {written}"
            );
        }
        if page == 0 {
            let (spread, spread_statements) = measured(
                &app,
                &format!(
                    "{{ tasks(first: 2) {{ ...Page }} }} \
                     fragment Page on TaskConnection {{ edges {{ node {{ ...Row }} }} }} {fragment}"
                ),
            )
            .await;
            assert_eq!(spread_statements, alone_statements);
            let nodes = |page: &Value| -> Vec<Value> {
                let edges = page["tasks"]["edges"].as_array().unwrap();
                edges.iter().map(|edge| edge["node"].clone()).collect()
            };
            assert_eq!(nodes(&spread), nodes(&plain));
        }
        let edges = plain["tasks"]["edges"].as_array().unwrap();
        assert_eq!(
            edges.len(),
            alone["tasks"]["edges"].as_array().unwrap().len()
        );
        for edge in edges {
            let node = &edge["node"];
            assert!(!node["steps"].as_array().unwrap().is_empty(), "{node}");
            assert_eq!(node["recent"].as_array().unwrap().len(), 2, "{node}");
            assert_eq!(node["early"][0]["seq"], 2, "{node}");
        }
        seen += edges.len();
        assert_eq!(plain["tasks"]["pageInfo"]["hasNextPage"], page == 0);
        after = plain["tasks"]["pageInfo"]["endCursor"].clone();
    }
    assert_eq!(seen, 3);

    // Selection order, a repeated leaf once in its first place; through
    // fragments, each field where GraphQL collects it.
    for query in [
        "{ tasks(first: 1) { edges { node { status id status \
         plan { version key } } cursor } pageInfo { endCursor hasNextPage } } }",
        "{ tasks(first: 1) { edges { node { status ...R ... on Task { plan { key } } } \
         cursor } pageInfo { endCursor } } } fragment R on Task { id status plan { version } }",
    ] {
        let raw = raw_answer(&app, query).await;
        assert!(
            raw.starts_with(
                "{\"data\":{\"tasks\":{\"edges\":[{\"node\":{\"status\":\"COMPLETED\",\"id\":"
            ),
            "{raw}"
        );
        assert!(
            raw.contains("\"plan\":{\"version\":1,\"key\":\"three\"}},\"cursor\":"),
            "{raw}"
        );
        assert!(raw.contains("\"pageInfo\":{\"endCursor\":"), "{raw}");
    }
}

for_both_backends!(a_plain_nested_page_answers_as_the_general_path_does);

/// A nested page (a conversation's turns, a task's children) whose
/// selection is all plain is built in one pass from the rows its parent's
/// siblings' pages were read with (`plain_page::answer_nested`), and
/// answers what the general path answers (the same selection beside a
/// review). Either way, the pages of every parent, their steps and their
/// event windows take as many statements for 3 parents as for 12.
async fn a_plain_nested_page_answers_as_the_general_path_does(backend: Backend) {
    let app = app(backend).await;
    publish_three(&app).await;
    let nested = |list: &str, field: &str, extra: &str| {
        format!(
            "{{ {list} {{ edges {{ node {{ id {field} {{ __typename \
             pageInfo {{ hasPreviousPage hasNextPage startCursor endCursor __typename }} \
             edges {{ __typename cursor node {{ {TASK} {extra} }} }} }} }} }} }} }}"
        )
    };
    // The answer, the general path's with its reviews taken out, and the
    // statements of each.
    let both_ways = |query: String, general: String| {
        let app = &app;
        async move {
            let (plain, plain_statements) = measured(app, &query).await;
            let (mut general, general_statements) = measured(app, &general).await;
            let mut reviews = 0;
            let (list, field) = match general.get("conversations") {
                Some(_) => ("conversations", "turns"),
                None => ("tasks", "children"),
            };
            for parent in general[list]["edges"].as_array_mut().unwrap() {
                for edge in parent["node"][field]["edges"].as_array_mut().unwrap() {
                    let review = edge["node"]
                        .as_object_mut()
                        .unwrap()
                        .remove("pendingReview");
                    assert_eq!(review, Some(Value::Null), "{edge}");
                    reviews += 1;
                }
            }
            assert!(reviews > 0, "{general}");
            assert_eq!(plain, general);
            (plain, plain_statements, general_statements)
        }
    };
    let turns = |extra: &str| nested("conversations(first: 20)", "turns(last: 2)", extra);
    start_conversations(&app, 0, 3).await;
    let (_, plain_3, general_3) = both_ways(turns(""), turns("pendingReview { id }")).await;
    start_conversations(&app, 3, 9).await;
    let (twelve, plain_12, general_12) = both_ways(turns(""), turns("pendingReview { id }")).await;
    let conversations = twelve["conversations"]["edges"].as_array().unwrap();
    assert_eq!(conversations.len(), 12);
    for (c, edge) in conversations.iter().enumerate() {
        let turns = edge["node"]["turns"]["edges"].as_array().unwrap();
        let inputs: Vec<&str> = turns
            .iter()
            .map(|t| t["node"]["input"].as_str().unwrap())
            .collect();
        assert_eq!(inputs, [format!("c{c} t2"), format!("c{c} t3")]);
        for turn in turns {
            assert_eq!(turn["node"]["steps"].as_array().unwrap().len(), 3, "{turn}");
            assert_eq!(
                turn["node"]["recent"].as_array().unwrap().len(),
                2,
                "{turn}"
            );
        }
    }
    assert_eq!(plain_3, plain_12, "plain: 3 conversations vs 12");
    assert_eq!(general_3, general_12, "general: 3 conversations vs 12");
    assert!(plain_12 < general_12, "{plain_12} vs {general_12}");

    publish_parent(&app).await;
    for _ in 0..3 {
        app.start_task("acme", json!({"planKey": "parent"})).await;
    }
    app.run_tasks().await;
    let children = |extra: &str| {
        nested(
            "tasks(filter: {planKey: \"parent\"}, first: 20)",
            "children(first: 2)",
            extra,
        )
    };
    let (six, _, _) = both_ways(children(""), children("pendingReview { id }")).await;
    let parents = six["tasks"]["edges"].as_array().unwrap();
    assert_eq!(parents.len(), 3);
    for parent in parents {
        let children = parent["node"]["children"]["edges"].as_array().unwrap();
        assert_eq!(children.len(), 2, "{parent}");
        assert_eq!(parent["node"]["children"]["pageInfo"]["hasNextPage"], true);
    }
}

/// Every plain field of a task, with its plan, steps and two event windows.
const TASK: &str = "__typename id status mode conversationId channel input subjectId \
    intent confidence confidenceThreshold plan { key version __typename } currentStepId \
    maxSteps error traceId idempotencyKey createdBy createdAt updatedAt startedAt \
    completedAt steps { __typename stepId tool attempt status summary error \
    idempotencyKey startedAt finishedAt durationMs } \
    recent: events(last: 2) { seq kind taskId stepId tool status summary error createdAt } \
    early: events(after: 1, first: 2) { seq summary }";

/// Acme's plan `parent`: three `spawn_task` steps, each a child on plan
/// `three` (inputs `one`, `two`, `three`).
async fn publish_parent(app: &TestApp) {
    let spawn = |id: &str| json!({"id": id, "tool": "spawn_task", "args": {"plan_key": "three", "input": id}});
    app.publish_plan(
        "acme",
        json!({"key": "parent", "intent": "t.parent",
               "steps": [spawn("one"), spawn("two"), spawn("three")]}),
    )
    .await
    .data();
}

/// The bytes of acme's admin's answer to `query`, to see its order.
async fn raw_answer(app: &TestApp, query: &str) -> String {
    app.http
        .post(app.url("/graphql"))
        .bearer_auth(app.admin_token("acme"))
        .json(&json!({ "query": query }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
