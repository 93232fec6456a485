//! Bulk retry (`retryTasks`): a tenant's failed tasks re-run as one job,
//! each once per failure however often the call is repeated or jobs
//! overlap, a job cut short by a crash taken up and finished, filters that
//! take exactly the tasks they name, other tenants untouched, and bad
//! input refused. The tasks call a local endpoint that fails until it is
//! fixed and counts every call per task.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
use brainstem_domain::{Actor, Principal, Role, TenantScope, tasks::RetryRequest};
use chrono::Utc;
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, encode_id, in_tenant, poll_until, uuid_of},
    on_both_backends,
};

on_both_backends!(
    two_hundred_failed_tasks_are_retried_once_each,
    from_start_runs_every_step_again,
    a_job_cut_short_is_taken_up_and_never_runs_a_task_twice,
    filters_take_exactly_the_tasks_they_name_in_the_callers_tenant,
    bad_input_is_refused,
);

const JOB: &str = "id status matched processed retried skipped failed errors { taskId message } createdBy createdAt finishedAt";

/// The endpoint the tasks call: while broken it answers 503 (409 to an
/// input starting with `x-`), once fixed 200; it counts calls per input.
#[derive(Clone, Default)]
struct Endpoint {
    fixed: Arc<AtomicBool>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Endpoint {
    async fn start() -> (Self, String) {
        let endpoint = Endpoint::default();
        let app = Router::new()
            .route(
                "/call",
                post(
                    |State(e): State<Endpoint>, Json(body): Json<Value>| async move {
                        let n = body["n"].as_str().unwrap_or_default().to_owned();
                        *e.calls.lock().unwrap().entry(n.clone()).or_default() += 1;
                        if e.fixed.load(Ordering::SeqCst) {
                            (StatusCode::OK, "{\"ok\": true}")
                        } else if n.starts_with("x-") {
                            (StatusCode::CONFLICT, "no")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "down")
                        }
                    },
                ),
            )
            .with_state(endpoint.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/call", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, url)
    }

    fn set_fixed(&self, fixed: bool) {
        self.fixed.store(fixed, Ordering::SeqCst);
    }

    fn calls(&self, n: &str) -> usize {
        self.calls.lock().unwrap().get(n).copied().unwrap_or(0)
    }

    /// How many inputs were called exactly `times` times.
    fn called(&self, times: usize) -> usize {
        self.calls
            .lock()
            .unwrap()
            .values()
            .filter(|c| **c == times)
            .count()
    }
}

/// Publish plan `key` in `tenant`: set some state, then call `url` once
/// (no retry) with the task's input.
async fn publish(app: &TestApp, tenant: &str, key: &str, url: &str) {
    app.publish_plan(
        tenant,
        json!({"key": key, "intent": format!("t.{key}"), "steps": [
            {"id": "prep", "tool": "set_state", "args": {"prepared": true}},
            {"id": "call", "tool": "http_request",
             "args": {"url": url, "method": "POST", "body": {"n": "{{ input.text }}"}},
             "retry": {"maxAttempts": 1}}
        ]}),
    )
    .await
    .data();
}

/// Start a task of `plan` in `tenant` with input `n`; its id and createdAt.
async fn start(app: &TestApp, tenant: &str, plan: &str, n: &str) -> (String, String) {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id createdAt } } }",
            json!({"input": {"planKey": plan, "input": n}}),
        )
        .await;
    let task = &res.data()["startTask"]["task"];
    (
        task["id"].as_str().unwrap().to_owned(),
        task["createdAt"].as_str().unwrap().to_owned(),
    )
}

async fn status(app: &TestApp, tenant: &str, id: &str) -> String {
    app.task(tenant, id).await["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn retry_tasks(app: &TestApp, token: &str, input: Value) -> crate::helpers::Gql {
    app.graphql(
        Some(token),
        &format!(
            "mutation($input: RetryTasksInput!) {{ retryTasks(input: $input) {{ job {{ {JOB} }} }} }}"
        ),
        json!({"input": input}),
    )
    .await
}

/// Start a bulk retry in `tenant` and wait until it completes; the job.
async fn retry_all(app: &TestApp, tenant: &str, input: Value) -> Value {
    let res = retry_tasks(app, &app.admin_token(tenant), input).await;
    let id = res.data()["retryTasks"]["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    completed(app, tenant, &id).await
}

async fn job(app: &TestApp, tenant: &str, id: &str) -> Value {
    app.graphql(
        Some(&app.admin_token(tenant)),
        &format!("query($id: ID!) {{ retryJob(id: $id) {{ {JOB} }} }}"),
        json!({"id": id}),
    )
    .await
    .data()["retryJob"]
        .clone()
}

async fn completed(app: &TestApp, tenant: &str, id: &str) -> Value {
    poll_until("the bulk retry completes", async || {
        let job = job(app, tenant, id).await;
        (job["status"] == "COMPLETED").then_some(job)
    })
    .await
}

fn counts(job: &Value) -> [u64; 5] {
    ["matched", "processed", "retried", "skipped", "failed"].map(|k| job[k].as_u64().unwrap())
}

fn admin_of(tenant: &str) -> Principal {
    Principal {
        actor: Actor::User(format!("admin@{tenant}")),
        tenant: Some(uuid::Uuid::parse_str(tenant).unwrap().into()),
        roles: [Role::TenantAdmin].into(),
        scopes: Default::default(),
    }
}

async fn two_hundred_failed_tasks_are_retried_once_each(app: TestApp) {
    let (endpoint, url) = Endpoint::start().await;
    app.create_tenant("acme").await;
    publish(&app, "acme", "call", &url).await;
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(start(&app, "acme", "call", &format!("t-{i}")).await.0);
    }
    app.run_tasks().await;
    assert_eq!(endpoint.called(1), 200);
    assert_eq!(status(&app, "acme", &ids[0]).await, "FAILED");

    endpoint.set_fixed(true);
    let res = retry_tasks(&app, &app.admin_token("acme"), json!({})).await;
    let created = &res.data()["retryTasks"]["job"];
    assert_eq!(created["matched"], 200, "{created}");
    let done = completed(&app, "acme", created["id"].as_str().unwrap()).await;
    assert_eq!(counts(&done), [200, 200, 200, 0, 0], "{done}");
    assert_eq!(done["errors"], json!([]));
    assert!(done["finishedAt"].is_string());
    app.run_tasks().await;
    for id in [&ids[0], &ids[99], &ids[199]] {
        let task = app.task("acme", id).await;
        assert_eq!(task["status"], "COMPLETED", "{task}");
        // From the failed step: the settled step did not run again.
        let prep_runs = task["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["stepId"] == "prep")
            .count();
        assert_eq!(prep_runs, 1, "{task}");
    }
    assert_eq!(endpoint.called(2), 200, "each task ran its call once more");

    // Again: nothing is left to retry, and nothing runs.
    let again = retry_all(&app, "acme", json!({"filter": {"statuses": ["FAILED"]}})).await;
    assert_eq!(counts(&again), [0, 0, 0, 0, 0], "{again}");
    assert_eq!(app.run_tasks().await, 0);
    assert_eq!(endpoint.called(2), 200);

    // Both jobs are listed, newest first, and audited.
    let listed = app
        .graphql(
            Some(&app.admin_token("acme")),
            "{ retryJobs { id matched } }",
            json!({}),
        )
        .await;
    let listed = listed.data()["retryJobs"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0]["id"], again["id"]);
    assert_eq!(listed[1]["matched"], 200);
    assert_eq!(
        app.audit_actions("acme", "task.retry_bulk").await,
        ["task.retry_bulk", "task.retry_bulk"]
    );
}

async fn from_start_runs_every_step_again(app: TestApp) {
    let (endpoint, url) = Endpoint::start().await;
    app.create_tenant("acme").await;
    publish(&app, "acme", "call", &url).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(start(&app, "acme", "call", &format!("t-{i}")).await.0);
    }
    app.run_tasks().await;
    for id in &ids {
        assert_eq!(status(&app, "acme", id).await, "FAILED");
    }

    endpoint.set_fixed(true);
    let done = retry_all(&app, "acme", json!({"fromStart": true})).await;
    assert_eq!(counts(&done), [3, 3, 3, 0, 0], "{done}");
    app.run_tasks().await;
    for (i, id) in ids.iter().enumerate() {
        let task = app.task("acme", id).await;
        assert_eq!(task["status"], "COMPLETED", "{task}");
        let runs = |step: &str| {
            task["steps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["stepId"] == step)
                .count()
        };
        assert_eq!((runs("prep"), runs("call")), (2, 2), "{task}");
        assert_eq!(endpoint.calls(&format!("t-{i}")), 2);
    }
}

async fn a_job_cut_short_is_taken_up_and_never_runs_a_task_twice(app: TestApp) {
    let (endpoint, url) = Endpoint::start().await;
    let tenant = uuid_of(&app.create_tenant("acme").await);
    let scope = TenantScope::new(uuid::Uuid::parse_str(&tenant).unwrap().into());
    publish(&app, "acme", "call", &url).await;
    for i in 0..30 {
        start(&app, "acme", "call", &format!("t-{i}")).await;
    }
    app.run_tasks().await;
    assert_eq!(endpoint.called(1), 30);
    endpoint.set_fixed(true);

    // A job whose runner dies after 12 tasks, its lease still held.
    let tasks = &app.domain.tasks;
    let first = in_tenant(
        scope,
        tasks.create_retry_job(&admin_of(&tenant), RetryRequest::default()),
    )
    .await
    .unwrap();
    assert_eq!(first.matched, 30);
    let handled = in_tenant(
        scope,
        tasks.run_retry_job(scope, first.id, "crashed", None, Some(12)),
    )
    .await
    .unwrap();
    assert_eq!(handled, 12);
    let cut = job(&app, "acme", &encode_id("RetryJob", &first.id.to_string())).await;
    assert_eq!(cut["status"], "RUNNING");
    assert_eq!(counts(&cut), [30, 12, 12, 0, 0], "{cut}");

    // Meanwhile a second job takes the 18 tasks still failed ...
    let second = retry_all(&app, "acme", json!({"filter": {"planKey": "call"}})).await;
    assert_eq!(counts(&second), [18, 18, 18, 0, 0], "{second}");
    // ... and all 30 run, and fail again.
    endpoint.set_fixed(false);
    app.run_tasks().await;
    assert_eq!(endpoint.called(2), 30);

    // A live lease is not taken over; an expired one is, and the first
    // job finishes: its 18 remaining tasks failed again since it matched
    // them, so it skips them rather than run them a second time.
    assert_eq!(tasks.resume_retry_jobs(Utc::now()).await.unwrap(), 0);
    let later = Utc::now() + chrono::Duration::seconds(31);
    assert_eq!(tasks.resume_retry_jobs(later).await.unwrap(), 1);
    let resumed = completed(&app, "acme", &encode_id("RetryJob", &first.id.to_string())).await;
    assert_eq!(counts(&resumed), [30, 30, 12, 18, 0], "{resumed}");
    assert_eq!(
        app.run_tasks().await,
        0,
        "nothing was put back in the queue"
    );
    assert_eq!(endpoint.called(2), 30);

    // Fixed for good: one more job runs each task exactly once more.
    endpoint.set_fixed(true);
    let last = retry_all(&app, "acme", json!({})).await;
    assert_eq!(counts(&last), [30, 30, 30, 0, 0], "{last}");
    app.run_tasks().await;
    assert_eq!(endpoint.called(3), 30);
}

async fn filters_take_exactly_the_tasks_they_name_in_the_callers_tenant(app: TestApp) {
    let (endpoint, url) = Endpoint::start().await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    publish(&app, "acme", "alpha", &url).await;
    publish(&app, "acme", "beta", &url).await;
    publish(&app, "globex", "alpha", &url).await;
    let mut early = Vec::new();
    for i in 0..3 {
        early.push(start(&app, "acme", "alpha", &format!("e-{i}")).await);
    }
    let mut middle = Vec::new();
    for i in 0..3 {
        middle.push(start(&app, "acme", "alpha", &format!("m-{i}")).await);
    }
    let mut beta = Vec::new();
    for i in 0..3 {
        beta.push(start(&app, "acme", "beta", &format!("b-{i}")).await);
    }
    let mut refused = Vec::new();
    for i in 0..2 {
        refused.push(start(&app, "acme", "alpha", &format!("x-{i}")).await);
    }
    let mut foreign = Vec::new();
    for i in 0..2 {
        foreign.push(start(&app, "globex", "alpha", &format!("g-{i}")).await);
    }
    app.run_tasks().await;
    endpoint.set_fixed(true);
    let ids = |group: &[(String, String)]| -> Vec<String> {
        group.iter().map(|(id, _)| id.clone()).collect()
    };
    // Which of acme's tasks are back in the queue (no longer FAILED).
    let all: Vec<String> = [&early, &middle, &beta, &refused]
        .iter()
        .flat_map(|g| ids(g.as_slice()))
        .collect();
    let requeued = async || {
        let mut back = Vec::new();
        for id in &all {
            if status(&app, "acme", id).await != "FAILED" {
                back.push(id.clone());
            }
        }
        back
    };

    let job = retry_all(&app, "acme", json!({"filter": {"planKey": "beta"}})).await;
    assert_eq!(counts(&job), [3, 3, 3, 0, 0], "{job}");
    assert_eq!(requeued().await, ids(&beta));

    let job = retry_all(
        &app,
        "acme",
        json!({"filter": {"errorMatches": "ANSWERED 409"}}),
    )
    .await;
    assert_eq!(counts(&job), [2, 2, 2, 0, 0], "{job}");
    assert_eq!(requeued().await, [ids(&beta), ids(&refused)].concat());

    let job = retry_all(
        &app,
        "acme",
        json!({"filter": {"createdAfter": middle[0].1, "createdBefore": beta[0].1}}),
    )
    .await;
    assert_eq!(counts(&job), [3, 3, 3, 0, 0], "{job}");
    assert_eq!(
        requeued().await,
        [ids(&middle), ids(&beta), ids(&refused)].concat()
    );

    let job = retry_all(&app, "acme", json!({"filter": {"failedStep": "prep"}})).await;
    assert_eq!(counts(&job), [0, 0, 0, 0, 0], "{job}");
    let job = retry_all(
        &app,
        "acme",
        json!({"filter": {"failedStep": "call"}, "limit": 2}),
    )
    .await;
    assert_eq!(counts(&job), [2, 2, 2, 0, 0], "{job}");
    assert_eq!(requeued().await.len(), 10, "the limit takes the oldest two");
    assert_eq!(status(&app, "acme", &early[2].0).await, "FAILED");

    // globex's failed tasks were never touched, and its admin sees none of
    // acme's jobs.
    for (id, _) in &foreign {
        assert_eq!(status(&app, "globex", id).await, "FAILED");
    }
    let theirs = app
        .graphql(
            Some(&app.admin_token("globex")),
            "{ retryJobs { id } }",
            json!({}),
        )
        .await;
    assert_eq!(theirs.data()["retryJobs"], json!([]));
    let peek = app
        .graphql(
            Some(&app.admin_token("globex")),
            "query($id: ID!) { retryJob(id: $id) { id } }",
            json!({"id": job["id"]}),
        )
        .await;
    assert_eq!(peek.error_code(), "NOT_FOUND");
    // A job's id is a global id: `node` finds it for its tenant only, and
    // `retryJob` takes no other type's id.
    let node = "query($id: ID!) { node(id: $id) { id ... on RetryJob { matched } } }";
    let own = app
        .graphql(
            Some(&app.admin_token("acme")),
            node,
            json!({"id": job["id"]}),
        )
        .await;
    assert_eq!(own.data()["node"]["id"], job["id"]);
    assert_eq!(own.data()["node"]["matched"], job["matched"]);
    let foreign_node = app
        .graphql(
            Some(&app.admin_token("globex")),
            node,
            json!({"id": job["id"]}),
        )
        .await;
    assert_eq!(foreign_node.error_code(), "NOT_FOUND");
    let task_id = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { retryJob(id: $id) { id } }",
            json!({"id": early[0].0}),
        )
        .await;
    assert_eq!(task_id.error_code(), "BAD_USER_INPUT");
    app.run_tasks().await;
    assert_eq!(endpoint.calls("g-0"), 1);
    assert_eq!(endpoint.calls("g-1"), 1);
}

async fn bad_input_is_refused(app: TestApp) {
    app.create_tenant("acme").await;
    let admin = app.admin_token("acme");
    for (input, says) in [
        (json!({"limit": 0}), "between 1 and 10000"),
        (json!({"limit": 10001}), "between 1 and 10000"),
        (json!({"limit": -5}), "between 1 and 10000"),
        (
            json!({"filter": {"statuses": ["FAILED", "COMPLETED"]}}),
            "only FAILED tasks can be retried",
        ),
        (
            json!({"filter": {"createdAfter": "2026-11-02T00:00:00Z",
                              "createdBefore": "2026-11-01T00:00:00Z"}}),
            "is later than",
        ),
        (json!({"filter": {"errorMatches": " "}}), "errorMatches"),
        (json!({"filter": {"planKey": "p".repeat(201)}}), "planKey"),
    ] {
        let res = retry_tasks(&app, &admin, input.clone()).await;
        assert_eq!(res.error_code(), "BAD_USER_INPUT", "{input}");
        assert!(
            res.error_message().contains(says),
            "{input}: {}",
            res.error_message()
        );
    }
    // The permission of `retryTask`: a read-only key may read jobs, not
    // start one.
    let (_, reader) = app.create_api_key("acme", &["tasks:read"]).await;
    let res = retry_tasks(&app, &reader, json!({})).await;
    assert_eq!(res.error_code(), "FORBIDDEN");
    let res = app
        .graphql(Some(&reader), "{ retryJobs { id } }", json!({}))
        .await;
    assert_eq!(res.data()["retryJobs"], json!([]));
    let res = app
        .graphql(
            Some(&admin),
            "query($id: ID!) { retryJob(id: $id) { id } }",
            json!({"id": "not-a-job"}),
        )
        .await;
    assert_eq!(res.error_code(), "BAD_USER_INPUT");
    // Nothing was stored or audited.
    assert!(
        app.audit_actions("acme", "task.retry_bulk")
            .await
            .is_empty()
    );
}
