//! LLM steps end to end: the real server, the real HTTP client of the
//! OpenAI-compatible provider, and a local fake OpenAI-compatible server
//! (axum on 127.0.0.1:0) that streams real server-sent events. Tasks are
//! driven with the executor's step function and read back over GraphQL.

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use brainstem::config::{Config, LlmProvider};
use brainstem_domain::{
    intent::Detector,
    llm::Price,
    tasks::{EventKind, TaskEvent},
};
use futures_util::stream;
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

/// What the fake server answers.
#[derive(Clone)]
enum Answer {
    /// Stream these deltas, then usage `(prompt, completion)` tokens.
    Stream(Vec<&'static str>, (u64, u64)),
    /// Answer with this status and an OpenAI-style error body.
    Fail(u16),
}

#[derive(Clone)]
struct Fake {
    answer: Arc<Mutex<Answer>>,
    /// `(authorization header, request body)` of every request.
    requests: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Fake {
    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn requests(&self) -> Vec<(String, Value)> {
        self.requests.lock().unwrap().clone()
    }
}

/// The SSE body for `deltas`, as OpenAI sends it: a role-only chunk, one
/// chunk per delta, a usage chunk with no choices, then `[DONE]`.
fn sse_body(deltas: &[&str], (prompt, completion): (u64, u64)) -> String {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]
            })
        )
    };
    let mut body = chunk(json!({"role": "assistant", "content": ""}));
    body.push_str(": keep-alive\n\n");
    for d in deltas {
        body.push_str(&chunk(json!({"content": d})));
    }
    body.push_str(&format!(
        "data: {}\n\n",
        json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}
        })
    ));
    body.push_str("data: [DONE]\n\n");
    body
}

async fn completions(
    State(fake): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    fake.requests.lock().unwrap().push((auth, body));
    let answer = fake.answer.lock().unwrap().clone();
    match answer {
        Answer::Stream(deltas, usage) => {
            // Sent in 9-byte pieces, so lines and events cross chunk
            // boundaries as they may on a real network.
            let pieces: Vec<Result<Vec<u8>, Infallible>> = sse_body(&deltas, usage)
                .into_bytes()
                .chunks(9)
                .map(|c| Ok(c.to_vec()))
                .collect();
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream::iter(pieces)))
                .unwrap()
        }
        Answer::Fail(status) => (
            StatusCode::from_u16(status).unwrap(),
            Json(json!({"error": {"message": "the fake model is overloaded", "type": "server_error"}})),
        )
            .into_response(),
    }
}

/// Start the fake server; returns it and its base URL (with `/v1`).
async fn fake_model(answer: Answer) -> (Fake, String) {
    let fake = Fake {
        answer: Arc::new(Mutex::new(answer)),
        requests: Arc::default(),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(fake.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fake, format!("http://{addr}/v1"))
}

/// Point the app at the fake server, with a price for its model.
pub(crate) fn use_fake(config: &mut Config, base_url: &str) {
    config.llm_provider = LlmProvider::Openai;
    config.llm_base_url = base_url.to_owned();
    config.llm_model = Some("fake-model".into());
    config.llm_api_key = Some(SecretString::from("sk-test"));
    config.llm_prices = BTreeMap::from([(
        "fake-model".to_owned(),
        Price {
            input_per_million: 2.0,
            output_per_million: 8.0,
        },
    )]);
    config.llm_retry_initial_delay_ms = 1;
}

const DELTAS: [&str; 4] = ["Tides ", "follow ", "the ", "moon."];

fn generate_plan(key: &str, args: Value) -> Value {
    json!({
        "key": key,
        "intent": format!("test.{key}"),
        "steps": [
            {"id": "draft", "tool": "llm.generate", "args": args},
            {"id": "after", "tool": "set_state", "args": {"copy": "{{ steps.draft.output.text }}"}}
        ]
    })
}

const USAGE_FIELDS: &str = "id status error state \
    usage { inputTokens outputTokens costMicros } \
    steps { stepId status error output usage { inputTokens outputTokens costMicros } } \
    events(first: 1000) { kind stepId error data }";

async fn task_with_usage(app: &TestApp, tenant: &str, id: &str) -> Value {
    let res = app
        .graphql(
            Some(&app.admin_token(tenant)),
            &format!("query($id: ID!) {{ task(id: $id) {{ {USAGE_FIELDS} }} }}"),
            json!({"id": id}),
        )
        .await;
    res.data()["task"].clone()
}

async fn run_plan(app: &TestApp, tenant: &str, plan: &str, input: &str) -> Value {
    let task = app
        .start_task(tenant, json!({"planKey": plan, "input": input}))
        .await;
    let id = task["id"].as_str().unwrap().to_owned();
    app.run_tasks().await;
    task_with_usage(app, tenant, &id).await
}

for_both_backends!(
    token_deltas_reach_a_websocket_subscriber_in_order,
    a_step_streams_from_the_model_and_records_usage_and_cost,
    token_deltas_are_published_in_order_and_add_up_to_the_output,
    a_budget_smaller_than_the_call_stops_the_task_before_any_request,
    the_tenant_daily_quota_counts_stored_usage_per_tenant,
    a_failing_model_gives_a_retryable_step_failure,
    the_offline_model_needs_no_server,
    llm_intent_detection_falls_back_to_the_rules_on_bad_json,
    the_usage_report_adds_up_the_tasks_run,
);

async fn a_step_streams_from_the_model_and_records_usage_and_cost(backend: Backend) {
    let (fake, url) = fake_model(Answer::Stream(DELTAS.to_vec(), (12, 5))).await;
    let app = TestApp::spawn_with(backend, |c| use_fake(c, &url)).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        generate_plan(
            "write",
            json!({
                "prompt": "Write one line about {{ input.text }}",
                "system": "Be brief",
                "max_tokens": 50,
                "temperature": 0.2,
                "save_as": "draft"
            }),
        ),
    )
    .await
    .data();
    let task = run_plan(&app, "acme", "write", "tides").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");

    // The output is the streamed deltas, in order, and later steps see it.
    let text = DELTAS.concat();
    let draft = &task["steps"][0];
    assert_eq!(draft["stepId"], "draft");
    assert_eq!(
        draft["output"],
        json!({"text": text, "model": "fake-model"})
    );
    assert_eq!(task["state"]["draft"], text);
    assert_eq!(task["state"]["copy"], text);

    // Usage as reported; cost = 12 × 2.0 + 5 × 8.0 micros.
    let usage = json!({"inputTokens": 12, "outputTokens": 5, "costMicros": 64});
    assert_eq!(draft["usage"], usage);
    assert_eq!(task["usage"], usage);
    let completed = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEP_COMPLETED" && e["stepId"] == "draft")
        .unwrap();
    assert_eq!(
        completed["data"]["usage"],
        json!({"input_tokens": 12, "output_tokens": 5, "cost_micros": 64})
    );

    // What reached the provider.
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let (auth, body) = &requests[0];
    assert_eq!(auth, "Bearer sk-test");
    assert_eq!(
        body,
        &json!({
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "Be brief"},
                {"role": "user", "content": "Write one line about tides"}
            ],
            "max_tokens": 50,
            "temperature": body["temperature"],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    assert!((body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
}

async fn token_deltas_are_published_in_order_and_add_up_to_the_output(backend: Backend) {
    let deltas: Vec<&'static str> = vec![
        "One ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight ", "nine ", "tén.",
    ];
    let (_fake, url) = fake_model(Answer::Stream(deltas.clone(), (20, 10))).await;
    let app = TestApp::spawn_with(backend, |c| use_fake(c, &url)).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        generate_plan("count", json!({"prompt": "Count to ten"})),
    )
    .await
    .data();
    let task = app.start_task("acme", json!({"planKey": "count"})).await;
    let id = task["id"].as_str().unwrap().to_owned();

    // Watch the app's event bus while its executor runs the task.
    let mut bus = app.domain.events.subscribe();
    assert_eq!(app.run_tasks().await, 1);

    let task = task_with_usage(&app, "acme", &id).await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let text = deltas.concat();
    assert_eq!(task["steps"][0]["output"]["text"], text);

    // Frames: at least one, at most one per delta, each starting where the
    // previous one ended (in characters), together the whole text.
    // On PostgreSQL the events arrive through LISTEN/NOTIFY: read until the
    // task's completion.
    let mut events: Vec<TaskEvent> = Vec::new();
    loop {
        let event = tokio::time::timeout(crate::helpers::WAIT, bus.recv())
            .await
            .expect("events arrive")
            .expect("the bus is open");
        let done =
            event.kind == EventKind::StatusChanged && event.status.as_deref() == Some("COMPLETED");
        events.push((*event).clone());
        if done {
            break;
        }
    }
    let frames: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e.kind == EventKind::TokenDelta)
        .map(|e| {
            assert_eq!(e.step_id.as_deref(), Some("draft"));
            assert_eq!(e.task_id.to_string(), crate::helpers::uuid_of(&id));
            (
                e.data["offset"].as_u64().unwrap(),
                e.data["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        !frames.is_empty() && frames.len() <= deltas.len(),
        "{frames:?}"
    );
    let mut offset = 0;
    for (at, frame) in &frames {
        assert_eq!(*at, offset, "{frames:?}");
        offset += frame.chars().count() as u64;
    }
    let streamed: String = frames.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(streamed, text);
    // Deltas come between the step's start and its completion.
    let position = |kind: EventKind| events.iter().position(|e| e.kind == kind).unwrap();
    let first_delta = position(EventKind::TokenDelta);
    assert!(position(EventKind::StepStarted) < first_delta);
    assert!(first_delta < position(EventKind::StepCompleted));
}

async fn a_budget_smaller_than_the_call_stops_the_task_before_any_request(backend: Backend) {
    let (fake, url) = fake_model(Answer::Stream(DELTAS.to_vec(), (12, 5))).await;
    let app = TestApp::spawn_with(backend, |c| {
        use_fake(c, &url);
        c.llm_task_token_budget = 1_000;
    })
    .await;
    app.create_tenant("acme").await;
    // The step tightens the task budget below what the call could use.
    app.publish_plan(
        "acme",
        generate_plan(
            "tight",
            json!({"prompt": "Write about {{ input.text }}", "max_tokens": 200, "max_task_tokens": 100}),
        ),
    )
    .await
    .data();
    // The configured budget is below the call's estimate too.
    app.publish_plan(
        "acme",
        generate_plan(
            "large",
            json!({"prompt": "Write about {{ input.text }}", "max_tokens": 4000}),
        ),
    )
    .await
    .data();
    for plan in ["tight", "large"] {
        let task = run_plan(&app, "acme", plan, "tides").await;
        assert_eq!(task["status"], "FAILED", "{plan}: {task}");
        let error = task["error"].as_str().unwrap();
        assert!(error.starts_with("BUDGET_EXCEEDED"), "{error}");
        assert!(error.contains("task's token budget"), "{error}");
        assert_eq!(task["steps"][0]["status"], "FAILED");
        assert_eq!(
            task["usage"],
            json!({"inputTokens": 0, "outputTokens": 0, "costMicros": 0})
        );
    }
    assert!(
        fake.requests().is_empty(),
        "no request may reach the provider"
    );
}

async fn the_tenant_daily_quota_counts_stored_usage_per_tenant(backend: Backend) {
    let (fake, url) = fake_model(Answer::Stream(DELTAS.to_vec(), (12, 5))).await;
    let app = TestApp::spawn_with(backend, |c| {
        use_fake(c, &url);
        // A call is estimated at 65 tokens: "Write about tides" (5 + 4),
        // "Be brief" (2 + 4), max_tokens 50. One fits, two (17 used + 65)
        // do not.
        c.llm_tenant_daily_token_quota = 70;
    })
    .await;
    let args =
        json!({"prompt": "Write about {{ input.text }}", "system": "Be brief", "max_tokens": 50});
    for tenant in ["acme", "globex"] {
        app.create_tenant(tenant).await;
        app.publish_plan(tenant, generate_plan("write", args.clone()))
            .await
            .data();
    }
    let first = run_plan(&app, "acme", "write", "tides").await;
    assert_eq!(first["status"], "COMPLETED", "{first}");
    let second = run_plan(&app, "acme", "write", "tides").await;
    assert_eq!(second["status"], "FAILED");
    let error = second["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "BUDGET_EXCEEDED: the tenant's daily token quota of 70 tokens has 53 left"
        ),
        "{error}"
    );
    assert_eq!(fake.requests().len(), 1);
    // Another tenant's quota is its own.
    let other = run_plan(&app, "globex", "write", "tides").await;
    assert_eq!(other["status"], "COMPLETED", "{other}");
    assert_eq!(fake.requests().len(), 2);
}

async fn a_failing_model_gives_a_retryable_step_failure(backend: Backend) {
    let (fake, url) = fake_model(Answer::Fail(500)).await;
    let app = TestApp::spawn_with(backend, |c| {
        use_fake(c, &url);
        c.llm_retry_max_attempts = 2;
    })
    .await;
    app.create_tenant("acme").await;
    let mut plan = generate_plan("write", json!({"prompt": "Write about {{ input.text }}"}));
    // The step may run twice, a minute apart: the test sees the first try.
    plan["steps"][0]["retry"] =
        json!({"maxAttempts": 2, "initialBackoffMs": 60000, "maxBackoffMs": 60000});
    app.publish_plan("acme", plan).await.data();
    let task = run_plan(&app, "acme", "write", "tides").await;
    // The client tried twice; the step failed and waits for its retry.
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(task["status"], "PENDING", "{task}");
    let failed = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEP_FAILED")
        .unwrap();
    assert_eq!(failed["data"]["will_retry"], true);
    let error = failed["error"].as_str().unwrap();
    assert_eq!(
        error,
        "MODEL_ERROR: the model provider answered 500: the fake model is overloaded"
    );
    assert_eq!(task["steps"][0]["error"], error);

    // A refusal (4xx) is not retryable: the task fails at once.
    fake.set(Answer::Fail(400));
    let task = run_plan(&app, "acme", "write", "tides").await;
    assert_eq!(task["status"], "FAILED");
    assert_eq!(fake.requests().len(), 3, "a 400 is not retried");
    let failed = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STEP_FAILED")
        .unwrap();
    assert_eq!(failed["data"]["will_retry"], false);
}

async fn the_offline_model_needs_no_server(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        generate_plan(
            "write",
            json!({"prompt": "Summarise {{ input.text }}", "save_as": "summary"}),
        ),
    )
    .await
    .data();
    let task = run_plan(&app, "acme", "write", "the quarterly report").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let text = "[offline model] Received 4 word(s): \"Summarise the quarterly report\"";
    assert_eq!(
        task["steps"][0]["output"],
        json!({"text": text, "model": "offline"})
    );
    assert_eq!(task["state"]["summary"], text);
    // Estimated tokens (a quarter of the characters); no price, no cost.
    let input = (("Summarise the quarterly report".len() as u64).div_ceil(4)) + 4;
    let output = (text.chars().count() as u64).div_ceil(4);
    assert_eq!(
        task["usage"],
        json!({"inputTokens": input, "outputTokens": output, "costMicros": 0})
    );
}

async fn llm_intent_detection_falls_back_to_the_rules_on_bad_json(backend: Backend) {
    let (fake, url) = fake_model(Answer::Stream(vec!["I think ", "it is a driver"], (40, 6))).await;
    let app = TestApp::spawn_with(backend, |c| {
        use_fake(c, &url);
        c.intent_detector = Detector::Llm;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({
            "key": "driver", "intent": "fleet.new_driver", "description": "add a driver",
            "patterns": ["driver"],
            "steps": [{"id": "note", "tool": "set_state", "args": {"seen": true}}]
        }),
    )
    .await
    .data();
    let start = |input: &'static str| {
        let app = &app;
        async move {
            let task = app.start_task("acme", json!({"input": input})).await;
            let id = task["id"].as_str().unwrap().to_owned();
            app.run_tasks().await;
            let full = app.task("acme", &id).await;
            (full, task_with_usage(app, "acme", &id).await)
        }
    };

    // Not JSON: the rules decide (a unique pattern match, 0.95).
    let (task, usage) = start("a new driver starts monday").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["intent"], "fleet.new_driver");
    assert_eq!(task["confidence"], 0.95);
    let planned = task["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "STATUS_CHANGED" && e["status"] == "EXECUTING")
        .unwrap();
    let reasoning = planned["data"]["reasoning"].as_str().unwrap();
    assert!(reasoning.contains("unusable"), "{reasoning}");
    // The detection's call counts toward the task.
    assert_eq!(usage["usage"]["inputTokens"], 40);

    // The model was asked to choose among the tenant's intents.
    let (_, body) = &fake.requests()[0];
    assert_eq!(body["max_tokens"], 100);
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("- fleet.new_driver: add a driver"),
        "{prompt}"
    );
    assert!(prompt.contains("- general_instruction"), "{prompt}");

    // Valid JSON: the model decides, even where no pattern matches.
    fake.set(Answer::Stream(
        vec![
            "{\"intent\": \"fleet.new_driver\",",
            " \"confidence\": 0.9}",
        ],
        (40, 12),
    ));
    let (task, _) = start("we hired someone to haul freight").await;
    assert_eq!(task["intent"], "fleet.new_driver");
    assert_eq!(task["confidence"], 0.9);
    assert_eq!(task["status"], "COMPLETED", "{task}");
}

/// The whole path: the fake model streams over real SSE, `llm.generate`
/// publishes frames, and a real graphql-transport-ws subscriber receives
/// them in order; together they are the stored output.
async fn token_deltas_reach_a_websocket_subscriber_in_order(backend: Backend) {
    let deltas = vec![
        "Streaming ",
        "over ",
        "a ",
        "real ",
        "socket, ",
        "frame ",
        "by ",
        "frame.",
    ];
    let (_fake, url) = fake_model(Answer::Stream(deltas.clone(), (20, 10))).await;
    let app = TestApp::spawn_with(backend, |c| use_fake(c, &url)).await;
    app.create_tenant("acme").await;
    app.publish_plan("acme", generate_plan("live", json!({"prompt": "Say it"})))
        .await
        .data();
    let id = app.start_task("acme", json!({"planKey": "live"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = crate::streams::watch_run(&app, "acme", &id).await;
    let mut text = String::new();
    for e in events.iter().filter(|e| e["__typename"] == "TokenDelta") {
        assert_eq!(
            e["offset"].as_u64().unwrap() as usize,
            text.chars().count(),
            "frames arrive in order, without gaps"
        );
        text.push_str(e["text"].as_str().unwrap());
    }
    assert_eq!(text, deltas.concat());
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    assert!(
        events
            .iter()
            .any(|e| e["__typename"] == "StepCompleted" && e["stepId"] == "draft"),
        "{events:?}"
    );
}

/// `usage(from, to)`: a tenant's tasks, step attempts, tokens and cost in
/// a period, as the tasks themselves record them.
async fn the_usage_report_adds_up_the_tasks_run(backend: Backend) {
    let (_fake, url) = fake_model(Answer::Stream(DELTAS.to_vec(), (20, 10))).await;
    let app = TestApp::spawn_with(backend, |c| use_fake(c, &url)).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let admin = app.admin_token("acme");
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    app.publish_plan("acme", generate_plan("live", json!({"prompt": "Say it"})))
        .await
        .data();
    // One run fails: its second step is blocked.
    app.graphql(
        Some(&admin),
        "mutation($c: JSON!) { saveGuardrail(input: {name: \"no\", severity: BLOCK, condition: $c}) { guardrail { name } } }",
        json!({"c": {"step": "after", "payload.fail": true}}),
    )
    .await
    .data();
    let mut ids = Vec::new();
    for fail in [false, false, true] {
        let task = app
            .start_task(
                "acme",
                json!({"planKey": "live", "payload": {"fail": fail}}),
            )
            .await;
        ids.push(task["id"].as_str().unwrap().to_owned());
    }
    app.run_tasks().await;
    let after = chrono::Utc::now() + chrono::Duration::seconds(1);

    // What the tasks themselves say.
    let (mut attempts, mut input, mut output, mut cost) = (0, 0, 0, 0);
    let mut statuses = Vec::new();
    for id in &ids {
        let task = task_with_usage(&app, "acme", id).await;
        statuses.push(task["status"].as_str().unwrap().to_owned());
        attempts += task["steps"].as_array().unwrap().len() as i64;
        input += task["usage"]["inputTokens"].as_i64().unwrap();
        output += task["usage"]["outputTokens"].as_i64().unwrap();
        cost += task["usage"]["costMicros"].as_i64().unwrap();
    }
    assert_eq!(statuses, ["COMPLETED", "COMPLETED", "FAILED"]);
    assert_eq!((input, output), (60, 30));
    assert!(cost > 0);

    let usage = |token: String,
                 from: chrono::DateTime<chrono::Utc>,
                 to: chrono::DateTime<chrono::Utc>| {
        let app = &app;
        async move {
            app.graphql(
                Some(&token),
                "query($from: DateTime!, $to: DateTime!) { usage(from: $from, to: $to) { \
                 tasksStarted tasksCompleted tasksFailed stepAttempts inputTokens outputTokens costMicros } }",
                json!({"from": from.to_rfc3339(), "to": to.to_rfc3339()}),
            )
            .await
        }
    };
    let report = usage(admin.clone(), before, after).await;
    assert_eq!(
        report.data()["usage"],
        json!({"tasksStarted": 3, "tasksCompleted": 2, "tasksFailed": 1, "stepAttempts": attempts,
               "inputTokens": input, "outputTokens": output, "costMicros": cost})
    );
    // Another period, another tenant: nothing.
    let earlier = usage(admin.clone(), before - chrono::Duration::days(1), before).await;
    assert_eq!(earlier.data()["usage"]["tasksStarted"], 0);
    assert_eq!(earlier.data()["usage"]["inputTokens"], 0);
    let theirs = usage(app.admin_token("globex"), before, after).await;
    assert_eq!(theirs.data()["usage"]["stepAttempts"], 0);
    // Refused: a period backwards or too long, a caller who is no admin.
    assert_eq!(
        usage(admin.clone(), after, before).await.error_code(),
        "BAD_USER_INPUT"
    );
    assert_eq!(
        usage(admin.clone(), before - chrono::Duration::days(400), after)
            .await
            .error_code(),
        "BAD_USER_INPUT"
    );
    let member = app.token(Some("acme"), &[brainstem_domain::Role::Member]);
    assert_eq!(usage(member, before, after).await.error_code(), "FORBIDDEN");
}

/// `languageModel` names the model that answers by default, for clients to
/// show before any answer: the offline one unless configured, the
/// endpoint's model for an OpenAI-compatible one; signed-in callers only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answering_model_is_named_for_clients() {
    const QUERY: &str = "{ languageModel { provider model } }";
    let offline = TestApp::spawn(Backend::Sqlite).await;
    offline.create_tenant("acme").await;
    let res = offline
        .graphql(Some(&offline.admin_token("acme")), QUERY, json!({}))
        .await;
    assert_eq!(
        res.data()["languageModel"],
        json!({"provider": "offline", "model": "offline"})
    );
    assert_eq!(
        offline.graphql(None, QUERY, json!({})).await.error_code(),
        "UNAUTHENTICATED"
    );

    let remote =
        TestApp::spawn_with(Backend::Sqlite, |c| use_fake(c, "http://127.0.0.1:9/v1")).await;
    remote.create_tenant("acme").await;
    let res = remote
        .graphql(Some(&remote.admin_token("acme")), QUERY, json!({}))
        .await;
    assert_eq!(
        res.data()["languageModel"],
        json!({"provider": "openai", "model": "fake-model"})
    );
}
