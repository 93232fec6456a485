//! `/metrics`: every domain metric family moves when its event happens,
//! read from the text exposition before and after.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{Router, http::StatusCode, routing::post};
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use futures_util::StreamExt;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp, poll_until},
    streams::{EVENTS, connect, deliveries},
};

for_both_backends!(each_metric_family_moves_when_its_event_happens);

/// The exposition's samples as `(name, labels, value)`.
fn samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            Some((name.to_owned(), labels.to_owned(), value.parse().ok()?))
        })
        .collect()
}

struct Scrape(Vec<(String, String, f64)>);

impl Scrape {
    async fn of(app: &TestApp) -> Self {
        Self(samples(&app.metrics_text().await))
    }

    /// The sum of `name`'s samples that carry every label of `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.split(',').any(|pair| pair == format!("{k}=\"{v}\"")))
            })
            .map(|(_, _, v)| v)
            .sum()
    }
}

/// A server on 127.0.0.1 whose `/flaky` answers 500 once, then 200, and
/// `/hook` 200; its base URL.
async fn partner() -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/flaky",
            post(move || {
                let calls = calls.clone();
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    }
                }
            }),
        )
        .route("/hook", post(|| async { StatusCode::OK }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// Drive the executor until the task leaves `PENDING` (a retry backs off
/// for a millisecond or two), then read it.
async fn run_to_rest(app: &TestApp, id: &str) -> Value {
    for _ in 0..1000 {
        app.run_tasks().await;
        if app.task("acme", id).await["status"] != "PENDING" {
            break;
        }
    }
    app.task("acme", id).await
}

async fn start(app: &TestApp, plan: &str) -> String {
    app.start_task(
        "acme",
        json!({"planKey": plan, "input": "summarise the week"}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn each_metric_family_moves_when_its_event_happens(backend: Backend) {
    // A tiny event bus, so a subscriber that does not read falls behind
    // and catches up from the store.
    let app = TestApp::spawn_with(backend, |c| c.event_bus_capacity = 4).await;
    let base = partner().await;
    let tenant = app.create_tenant("acme").await;
    let steps: Vec<Value> = [
        json!({"id": "flaky", "tool": "http_request",
               "args": {"method": "POST", "url": format!("{base}/flaky")},
               "retry": {"maxAttempts": 2, "initialBackoffMs": 1, "maxBackoffMs": 2}}),
        json!({"id": "answer", "tool": "agent", "args": {}}),
    ]
    .into_iter()
    .chain((0..12).map(|i| json!({"id": format!("s{i}"), "tool": "set_state", "args": {"i": i}})))
    .collect();
    app.publish_plan(
        "acme",
        json!({"key": "work", "intent": "t.work", "steps": steps}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "checked", "intent": "t.checked", "steps": [
            {"id": "wait", "tool": "set_state", "args": {"x": 1}, "requiresReview": true}
        ]}),
    )
    .await
    .data();
    let admin = app.admin_token("acme");
    app.graphql(
        Some(&admin),
        "mutation($input: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $input) { secret } }",
        json!({"input": {"name": "crm", "url": format!("{base}/hook"), "events": ["TASK_COMPLETED"]}}),
    )
    .await
    .data();
    let before = Scrape::of(&app).await;

    // Queued, not yet run: the queue is one deep.
    let work = start(&app, "work").await;
    let queued = Scrape::of(&app).await;
    assert_eq!(queued.value("brainstem_queue_depth", &[]), 1.0);

    // A subscriber of the domain's event stream that reads nothing while
    // the task runs: it falls out of the 4-event bus and catches up.
    let mut stalled = deliveries(&app, &tenant, &work);
    assert!(stalled.next().await.is_some(), "the stored creation event");
    // Polled until its replay's store read comes back empty and it waits
    // on the bus, where nothing comes until the task runs: the timeout is
    // the proof that nothing does, not a delay.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(500), stalled.next())
            .await
            .is_err(),
        "now following the bus"
    );

    // A WebSocket subscriber.
    let mut ws = connect(&app, "acme").await;
    ws.subscribe("1", EVENTS, json!({"id": work})).await;
    // The subscription holds its slot once the server has its stream.
    let during = poll_until("the subscription holds its slot", async || {
        let scrape = Scrape::of(&app).await;
        (scrape.value("brainstem_subscriptions_open", &[]) >= 1.0).then_some(scrape)
    })
    .await;
    assert_eq!(during.value("brainstem_subscriptions_open", &[]), 1.0);
    let task = run_to_rest(&app, &work).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let received = ws.events_until_complete().await;
    assert!(!received.is_empty());
    drop(ws);
    let mut caught_up = 0;
    while stalled.next().await.is_some() {
        caught_up += 1;
    }
    assert!(
        caught_up > 4,
        "every later event, from the store: {caught_up}"
    );

    // A review, decided.
    let checked = start(&app, "checked").await;
    app.run_tasks().await;
    let waiting = app.task("acme", &checked).await;
    assert_eq!(waiting["status"], "NEEDS_REVIEW");
    app.graphql(
        Some(&admin),
        "mutation($t: ID!, $r: ID!) { resumeTask(input: {taskId: $t, reviewId: $r}) { task { status } } }",
        json!({"t": checked, "r": waiting["pendingReview"]["id"]}),
    )
    .await
    .data();
    app.run_tasks().await;

    // A lease that expires: claimed, never finished, reaped.
    start(&app, "checked").await;
    let now = Utc::now();
    assert!(app.executor.claim(now).await.unwrap().is_some());
    assert_eq!(
        app.housekeeping
            .reap_expired(now + Duration::hours(1))
            .await
            .unwrap(),
        1
    );

    // A memory search, a webhook delivery and a scheduled run.
    app.graphql(
        Some(&admin),
        "{ searchMemories(query: \"carrier delays\") { hits { memory { id } } } }",
        json!({}),
    )
    .await
    .data();
    assert!(app.domain.webhooks.deliver_due(Utc::now()).await.unwrap() >= 1);
    app.graphql(
        Some(&admin),
        "mutation { createSchedule(input: {name: \"nightly\", planKey: \"checked\", cron: \"0 2 * * *\"}) { schedule { name } } }",
        json!({}),
    )
    .await
    .data();
    assert_eq!(
        app.domain
            .schedules
            .run_due(Utc::now() + Duration::days(2))
            .await
            .unwrap(),
        1
    );

    let after = Scrape::of(&app).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        after.value(name, labels) - before.value(name, labels)
    };
    let work_labels = [("plan", "work"), ("channel", "API")];
    assert_eq!(moved("brainstem_tasks_started_total", &work_labels), 1.0);
    assert_eq!(
        moved(
            "brainstem_tasks_finished_total",
            &[
                ("plan", "work"),
                ("channel", "API"),
                ("status", "COMPLETED")
            ]
        ),
        1.0
    );
    assert_eq!(
        moved("brainstem_task_duration_seconds_count", &[("plan", "work")]),
        1.0
    );
    assert!(moved("brainstem_claim_latency_seconds_count", &[]) >= 3.0);
    assert_eq!(
        moved(
            "brainstem_step_duration_seconds_count",
            &[("tool", "http_request"), ("outcome", "failed")]
        ),
        1.0
    );
    assert_eq!(
        moved(
            "brainstem_step_duration_seconds_count",
            &[("tool", "set_state"), ("outcome", "completed")]
        ),
        13.0,
        "twelve in `work`, one in `checked`"
    );
    assert_eq!(
        moved("brainstem_step_retries_total", &[("tool", "http_request")]),
        1.0
    );
    assert_eq!(moved("brainstem_lease_expiries_total", &[]), 1.0);
    assert_eq!(
        moved("brainstem_reviews_opened_total", &[("plan", "checked")]),
        1.0
    );
    assert_eq!(moved("brainstem_review_wait_seconds_count", &[]), 1.0);
    assert!(moved("brainstem_llm_calls_total", &[("outcome", "ok")]) >= 1.0);
    assert!(moved("brainstem_llm_tokens_total", &[("kind", "input")]) >= 1.0);
    assert!(moved("brainstem_llm_tokens_total", &[("kind", "output")]) >= 1.0);
    assert!(moved("brainstem_llm_time_to_first_token_seconds_count", &[]) >= 1.0);
    assert!(
        after
            .0
            .iter()
            .any(|(name, _, _)| name == "brainstem_llm_cost_total"),
        "the cost family is exported"
    );
    assert!(
        moved(
            "brainstem_memory_search_duration_seconds_count",
            &[("mode", "hybrid")]
        ) >= 1.0
    );
    assert!(moved("brainstem_subscription_catch_up_reads_total", &[]) >= 1.0);
    assert!(moved("brainstem_websocket_event_frames_total", &[]) >= received.len() as f64);
    assert_eq!(
        moved(
            "brainstem_webhook_attempts_total",
            &[("outcome", "delivered")]
        ),
        2.0,
        "`work` and `checked` completed"
    );
    assert_eq!(moved("brainstem_schedule_runs_total", &[]), 1.0);
    assert_eq!(
        after.value("brainstem_queue_depth", &[]),
        2.0,
        "the reaped task and the scheduled run wait"
    );

    // The Grafana dashboard asks only for series the server exports.
    let dashboard = include_str!("../../ops/grafana-dashboard.json");
    let wanted = regex::Regex::new(r"brainstem_[a-z_]+").unwrap();
    for name in wanted.find_iter(dashboard).map(|m| m.as_str()) {
        assert!(
            after.0.iter().any(|(n, _, _)| n == name),
            "the dashboard's `{name}` is not exported"
        );
    }
}
