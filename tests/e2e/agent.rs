//! Agent steps end to end: the model chooses tools in a bounded loop. The
//! real server, the real HTTP client of the OpenAI-compatible provider, and
//! a local fake OpenAI-compatible server (axum on 127.0.0.1:0) that streams
//! a scripted turn per request over real server-sent events: text, or tool
//! calls whose arguments arrive in pieces. Also the offline provider's
//! documented tool calling, with no server at all.

use std::{
    collections::VecDeque,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use axum::{Json, Router, body::Body, extract::State, response::Response, routing::post};
use brainstem_domain::tools::{Tool, ToolContext, ToolError, ToolOutput};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{
    for_both_backends,
    helpers::{Backend, TestApp},
};

/// One scripted answer of the fake model.
#[derive(Clone)]
pub(crate) enum Turn {
    /// Stream this text in the given pieces.
    Text(Vec<&'static str>),
    /// Call these tools: `(name, arguments as JSON text)`.
    Calls(Vec<(&'static str, String)>),
    /// Answer `You said first: <the request's first user message>`: what
    /// the model was shown of the conversation.
    EchoFirst,
}

#[derive(Clone)]
pub(crate) struct Script {
    /// Answers in order; the last one repeats.
    turns: Arc<Mutex<VecDeque<Turn>>>,
    /// Every request's body.
    requests: Arc<Mutex<Vec<Value>>>,
}

impl Script {
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// A turn as OpenAI streams it, with usage `(10 × n, 2 × n)` for the n-th
/// request so sums are checkable.
fn sse_body(turn: &Turn, n: u64, request: &Value) -> String {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "model": "fake-model",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut body = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    match turn {
        Turn::EchoFirst => {
            let first = request["messages"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["role"] == "user"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default();
            body.push_str(&chunk(
                json!({"content": format!("You said first: {first}")}),
                Value::Null,
            ));
            body.push_str(&chunk(json!({}), json!("stop")));
        }
        Turn::Text(pieces) => {
            for p in pieces {
                body.push_str(&chunk(json!({"content": p}), Value::Null));
            }
            body.push_str(&chunk(json!({}), json!("stop")));
        }
        Turn::Calls(calls) => {
            for (index, (name, arguments)) in calls.iter().enumerate() {
                body.push_str(&chunk(
                    json!({"tool_calls": [{"index": index, "id": format!("call_{n}_{index}"), "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
                // The arguments arrive in two pieces.
                let middle = arguments.len() / 2;
                for piece in [&arguments[..middle], &arguments[middle..]] {
                    body.push_str(&chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                        Value::Null,
                    ));
                }
            }
            body.push_str(&chunk(json!({}), json!("tool_calls")));
        }
    }
    body.push_str(&format!(
        "data: {}\n\n",
        json!({"choices": [], "usage": {"prompt_tokens": 10 * n, "completion_tokens": 2 * n}})
    ));
    body.push_str("data: [DONE]\n\n");
    body
}

async fn completions(State(script): State<Script>, Json(body): Json<Value>) -> Response {
    let n = {
        let mut requests = script.requests.lock().unwrap();
        requests.push(body.clone());
        requests.len() as u64
    };
    let turn = {
        let mut turns = script.turns.lock().unwrap();
        if turns.len() > 1 {
            turns.pop_front().unwrap()
        } else {
            turns.front().cloned().unwrap()
        }
    };
    let pieces: Vec<Result<Vec<u8>, Infallible>> = sse_body(&turn, n, &body)
        .into_bytes()
        .chunks(11)
        .map(|c| Ok(c.to_vec()))
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream::iter(pieces)))
        .unwrap()
}

/// Start the fake model with `turns`; returns it and its base URL.
pub(crate) async fn fake_model(turns: Vec<Turn>) -> (Script, String) {
    let script = Script {
        turns: Arc::new(Mutex::new(turns.into())),
        requests: Arc::default(),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(script.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (script, format!("http://{addr}/v1"))
}

/// `test.lookup`: answers `{"found": <q upper-cased>}` and counts its calls.
pub(crate) struct Lookup(pub(crate) Arc<AtomicUsize>);

#[async_trait]
impl Tool for Lookup {
    fn key(&self) -> &str {
        "test.lookup"
    }
    fn description(&self) -> &str {
        "Look a word up."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "required": ["q"], "additionalProperties": false,
               "properties": {"q": {"type": "string", "minLength": 1}}})
    }
    async fn call(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let q = args["q"].as_str().unwrap_or_default().to_uppercase();
        Ok(ToolOutput::with_output(json!({"found": q}), "looked up"))
    }
}

/// `test.slow`: never finishes within its one-second timeout.
struct Slow;

#[async_trait]
impl Tool for Slow {
    fn key(&self) -> &str {
        "test.slow"
    }
    fn description(&self) -> &str {
        "Takes too long."
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    async fn call(&self, _ctx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        std::future::pending::<()>().await;
        Ok(ToolOutput::default())
    }
}

/// An app on the fake model with `test.lookup` and `test.slow`; returns the
/// lookup's call counter too.
async fn app_on(backend: Backend, url: &str) -> (TestApp, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Lookup(calls.clone())), Arc::new(Slow)];
    let app = TestApp::spawn_full(backend, |c| crate::llm::use_fake(c, url), tools).await;
    app.create_tenant("acme").await;
    (app, calls)
}

const RESULT_FIELDS: &str = "id status error state \
    result { content model tokenUsage { input output } finishReason memorySuggestions toolCalls iterations } \
    steps { stepId tool status error output }";

/// Publish an agent plan with `args`, start it with `input`, run it, and
/// read it back.
async fn run_agent(app: &TestApp, args: Value, input: &str) -> Value {
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "test.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": args}]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "assist", "input": input}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    app.graphql(
        Some(&app.admin_token("acme")),
        &format!("query($id: ID!) {{ task(id: $id) {{ {RESULT_FIELDS} }} }}"),
        json!({"id": id}),
    )
    .await
    .data()["task"]
        .clone()
}

/// The tool messages of a request, by call id.
fn tool_messages(request: &Value) -> Vec<(String, Value)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                serde_json::from_str(m["content"].as_str().unwrap()).unwrap(),
            )
        })
        .collect()
}

fn step_ids(task: &Value) -> Vec<String> {
    task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stepId"].as_str().unwrap().to_owned())
        .collect()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

for_both_backends!(a_two_tool_loop_ends_with_the_models_answer);

async fn a_two_tool_loop_ends_with_the_models_answer(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![
            ("test_lookup", r#"{"q": "tide"}"#.into()),
            ("set_state", r#"{"noted": "tide"}"#.into()),
        ]),
        Turn::Text(vec!["TIDE ", "is noted. ", "[REMEMBER: likes tides]"]),
    ])
    .await;
    let (app, lookups) = app_on(backend, &url).await;
    let task = run_agent(
        &app,
        json!({"system": "Be brief.", "tools": ["test.lookup", "set_state"]}),
        "Look up tide and note it.",
    )
    .await;

    assert_eq!(task["status"], "COMPLETED", "{task}");
    let result = &task["result"];
    assert_eq!(result["finishReason"], "COMPLETE");
    assert_eq!(result["content"], "TIDE is noted.");
    assert_eq!(result["memorySuggestions"], json!(["likes tides"]));
    assert_eq!(result["model"], "fake-model");
    let answered = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s["tool"] == "agent")
        .unwrap();
    assert!(
        answered["output"].get("one_hop").is_none(),
        "a model that chains calls runs no one-hop loop: {answered}"
    );
    assert_eq!(
        result["tokenUsage"],
        json!({"input": 10 + 20, "output": 2 + 4}),
        "usage sums both iterations"
    );
    assert_eq!(result["toolCalls"], 2);
    assert_eq!(result["iterations"], 2);
    assert_eq!(
        step_ids(&task),
        ["answer", "answer:1.1", "answer:1.2", "answer:2"]
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert_eq!(task["state"]["noted"], "tide", "set_state ran as a step");

    // A suggestion becomes a memory only when accepted.
    let accept = "mutation($t: ID!, $i: Int!) { acceptMemorySuggestion(input: {taskId: $t, index: $i}) { memory { content importance } merged } }";
    let token = app.admin_token("acme");
    let kept = app
        .graphql(Some(&token), accept, json!({"t": task["id"], "i": 0}))
        .await;
    assert_eq!(
        kept.data()["acceptMemorySuggestion"]["memory"],
        json!({"content": "likes tides", "importance": 0.5})
    );
    let again = app
        .graphql(Some(&token), accept, json!({"t": task["id"], "i": 0}))
        .await;
    assert_eq!(again.data()["acceptMemorySuggestion"]["merged"], true);
    let missing = app
        .graphql(Some(&token), accept, json!({"t": task["id"], "i": 1}))
        .await;
    assert_eq!(missing.error_code(), "NOT_FOUND");

    let requests = script.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(tool_names(first), ["set_state", "test_lookup"]);
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are an AI assistant operating within a governed platform.")
    );
    assert_eq!(messages[1]["content"], "Be brief.");
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(messages[2]["content"], "Look up tide and note it.");
    let last = messages.last().unwrap();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .starts_with("TOOL USAGE RULES"),
        "the guardrail comes after the conversation"
    );
    // The second request answers both calls, after the model's turn.
    let second = &requests[1];
    let turn = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(turn["tool_calls"][0]["function"]["name"], "test_lookup");
    assert_eq!(
        turn["tool_calls"][0]["function"]["arguments"],
        r#"{"q": "tide"}"#
    );
    assert_eq!(
        tool_messages(second),
        [
            ("call_1_0".to_owned(), json!({"found": "TIDE"})),
            ("call_1_1".to_owned(), json!({"noted": "tide"})),
        ]
    );
}

for_both_backends!(
    invalid_arguments_are_answered_with_an_error_and_corrected,
    past_max_iterations_the_loop_ends_with_the_specifications_message,
    past_max_tool_calls_calls_are_refused_and_no_tools_are_offered,
    a_tool_that_times_out_is_answered_with_timeout_and_the_task_goes_on,
    a_tool_the_step_does_not_offer_is_refused,
    the_loops_tokens_stream_to_a_subscriber_and_add_up_to_the_result,
    another_tenant_never_sees_a_result,
    a_tenants_policy_tightens_its_loops,
    a_plan_is_offered_as_a_tool_and_runs_as_a_child_task,
    a_partner_tool_without_a_subscription_is_refused,
    a_budget_stops_the_loop_before_the_model_is_called,
);

async fn invalid_arguments_are_answered_with_an_error_and_corrected(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("test_lookup", r#"{"q": 5}"#.into())]),
        Turn::Calls(vec![("test_lookup", r#"{"q": "moon"}"#.into())]),
        Turn::Text(vec!["MOON."]),
    ])
    .await;
    let (app, lookups) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"tools": ["test.lookup"]}), "Look up the moon.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["result"]["content"], "MOON.");
    assert_eq!(task["result"]["iterations"], 3);
    assert_eq!(
        task["result"]["toolCalls"], 1,
        "the refused call did not run"
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert_eq!(
        step_ids(&task),
        ["answer", "answer:2", "answer:2.1", "answer:3"],
        "no step for the refused call"
    );
    let requests = script.requests();
    let (id, error) = &tool_messages(&requests[1])[0];
    assert_eq!(id, "call_1_0");
    assert_eq!(error["error"]["code"], "INVALID_ARGUMENTS");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("q"),
        "{error}"
    );
    assert_eq!(tool_messages(&requests[2])[1].1, json!({"found": "MOON"}));
}

async fn past_max_iterations_the_loop_ends_with_the_specifications_message(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Calls(vec![(
        "test_lookup",
        r#"{"q": "again"}"#.into(),
    )])])
    .await;
    let (app, lookups) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"max_iterations": 3}), "Loop forever.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["result"]["finishReason"], "ITERATION_LIMIT");
    assert_eq!(
        task["result"]["content"],
        "I was unable to complete this task due to complexity. The request required too many reasoning steps. Please try breaking it into smaller requests."
    );
    assert_eq!(
        script.requests().len(),
        3,
        "at most max_iterations model calls"
    );
    assert_eq!(lookups.load(Ordering::SeqCst), 3);
    assert_eq!(
        task["result"]["tokenUsage"],
        json!({"input": 10 + 20 + 30, "output": 2 + 4 + 6})
    );
}

async fn past_max_tool_calls_calls_are_refused_and_no_tools_are_offered(backend: Backend) {
    let three = (1..=3)
        .map(|i| ("test_lookup", format!(r#"{{"q": "w{i}"}}"#)))
        .collect();
    let (script, url) = fake_model(vec![Turn::Calls(three), Turn::Text(vec!["Done."])]).await;
    let (app, lookups) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"max_tool_calls": 2}), "Look up three words.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["result"]["finishReason"], "COMPLETE");
    assert_eq!(task["result"]["toolCalls"], 2);
    assert_eq!(lookups.load(Ordering::SeqCst), 2);
    let requests = script.requests();
    let answers = tool_messages(&requests[1]);
    assert_eq!(answers[0].1, json!({"found": "W1"}));
    assert_eq!(answers[1].1, json!({"found": "W2"}));
    assert_eq!(answers[2].1["error"]["code"], "TOOL_LIMIT");
    assert!(
        tool_names(&requests[1]).is_empty(),
        "with the calls spent, no tools are offered"
    );
}

async fn a_tool_that_times_out_is_answered_with_timeout_and_the_task_goes_on(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("test_slow", "{}".into())]),
        Turn::Text(vec!["It timed out."]),
    ])
    .await;
    let (app, _) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"tools": ["test.slow"]}), "Be slow.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let failed = &task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stepId"] == "answer:1.1")
        .unwrap()
        .clone();
    assert_eq!(failed["status"], "FAILED");
    let (_, answer) = &tool_messages(&script.requests()[1])[0];
    assert_eq!(answer["error"]["code"], "TIMEOUT", "{answer}");
    assert_eq!(task["result"]["content"], "It timed out.");
}

async fn a_tool_the_step_does_not_offer_is_refused(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("test_slow", "{}".into())]),
        Turn::Text(vec!["I cannot."]),
    ])
    .await;
    let (app, _) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"tools": ["test.lookup"]}), "Try the slow one.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let (_, answer) = &tool_messages(&script.requests()[1])[0];
    assert_eq!(answer["error"]["code"], "TOOL_NOT_FOUND");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Available tools: test_lookup"),
        "{answer}"
    );
    assert_eq!(step_ids(&task), ["answer", "answer:2"]);
}

for_both_backends!(a_step_says_what_each_tool_is_for);
/// The model sees the step's words for a tool in place of the tool's own;
/// a step describing a tool it does not offer fails, saying which.
async fn a_step_says_what_each_tool_is_for(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Text(vec!["Nothing to look up."])]).await;
    let (app, _) = app_on(backend, &url).await;
    let task = run_agent(
        &app,
        json!({"tools": ["test.lookup", "test.slow"],
               "tool_descriptions": {"test.lookup": "Look up an order by its number."}}),
        "Where is order 42?",
    )
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let offered: Vec<(String, String)> = script.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let f = &t["function"];
            (
                f["name"].as_str().unwrap().into(),
                f["description"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        offered,
        [
            (
                "test_lookup".to_owned(),
                "Look up an order by its number.".to_owned()
            ),
            ("test_slow".to_owned(), "Takes too long.".to_owned()),
        ]
    );

    let task = run_agent(
        &app,
        json!({"tools": ["test.lookup"], "tool_descriptions": {"test.slow": "Wait."}}),
        "Where is order 42?",
    )
    .await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"]
            .as_str()
            .unwrap()
            .contains("tool_descriptions names `test.slow`, which this step does not offer"),
        "{task}"
    );
    assert_eq!(
        script.requests().len(),
        1,
        "the failing step called no model"
    );
}

for_both_backends!(the_offline_model_runs_a_loop_with_no_server);

async fn the_offline_model_runs_a_loop_with_no_server(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    let task = run_agent(
        &app,
        json!({"tools": ["set_state"]}),
        "Remember the colour.\ncall set_state {\"colour\": \"teal\"}",
    )
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(task["state"]["colour"], "teal");
    assert_eq!(task["result"]["finishReason"], "COMPLETE");
    assert_eq!(
        task["result"]["content"],
        "[offline model] Tool results: set_state: {\"colour\":\"teal\"}"
    );
    assert_eq!(task["result"]["model"], "offline");
    assert_eq!(task["result"]["iterations"], 2);
}

/// The loop's token events reach a real graphql-transport-ws subscriber
/// and, concatenated, are the stored answer.
async fn the_loops_tokens_stream_to_a_subscriber_and_add_up_to_the_result(backend: Backend) {
    let pieces = vec!["The ", "word ", "was ", "TIDE."];
    let (_script, url) = fake_model(vec![
        Turn::Calls(vec![("test_lookup", r#"{"q": "tide"}"#.into())]),
        Turn::Text(pieces.clone()),
    ])
    .await;
    let (app, _) = app_on(backend, &url).await;
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "test.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": ["test.lookup"]}}]}),
    )
    .await
    .data();
    let id = app
        .start_task("acme", json!({"planKey": "assist", "input": "Which word?"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = crate::streams::watch_run(&app, "acme", &id).await;
    let text: String = events
        .iter()
        .filter(|e| e["__typename"] == "TokenDelta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, pieces.concat());
    let task = app.task("acme", &id).await;
    assert_eq!(task["status"], "COMPLETED");
    let stored = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { result { content } } }",
            json!({"id": id}),
        )
        .await;
    assert_eq!(stored.data()["task"]["result"]["content"], text);
}

/// Tenant B never reads tenant A's agent result.
async fn another_tenant_never_sees_a_result(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.create_tenant("acme").await;
    app.create_tenant("globex").await;
    let task = run_agent(&app, json!({}), "Private question.").await;
    assert!(
        task["result"]["content"]
            .as_str()
            .unwrap()
            .contains("Private")
    );
    let seen = app
        .graphql(
            Some(&app.admin_token("globex")),
            "query($id: ID!) { task(id: $id) { result { content } } }",
            json!({"id": task["id"]}),
        )
        .await;
    assert_eq!(seen.error_code(), "NOT_FOUND");
}

/// A tenant admin reads the executor policy and may tighten it for the
/// tenant, never loosen it; the tenant's loops run under it.
async fn a_tenants_policy_tightens_its_loops(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Calls(vec![(
        "test_lookup",
        r#"{"q": "more"}"#.into(),
    )])])
    .await;
    let (app, _) = app_on(backend, &url).await;
    let token = app.admin_token("acme");
    let read = "{ executorPolicy { effective { maxIterations maxToolCalls toolCallTimeoutMs loopTimeoutMs maxOutputTokens temperature } platform { maxIterations } } }";
    let policy = app.graphql(Some(&token), read, json!({})).await;
    let view = &policy.data()["executorPolicy"];
    assert_eq!(
        view["effective"],
        json!({"maxIterations": 5, "maxToolCalls": 10, "toolCallTimeoutMs": 30000,
               "loopTimeoutMs": 120000, "maxOutputTokens": 4000, "temperature": 0.7})
    );
    let set = "mutation($n: Int!) { setExecutorPolicy(input: {maxIterations: $n}) { effective { maxIterations maxToolCalls } } }";
    let looser = app.graphql(Some(&token), set, json!({"n": 6})).await;
    assert_eq!(looser.error_code(), "BAD_USER_INPUT");
    assert!(
        looser
            .error_message()
            .contains("maxIterations must be 1 to 5")
    );
    let tighter = app.graphql(Some(&token), set, json!({"n": 2})).await;
    assert_eq!(
        tighter.data()["setExecutorPolicy"]["effective"],
        json!({"maxIterations": 2, "maxToolCalls": 10})
    );
    let member = app.token(Some("acme"), &[brainstem_domain::Role::Member]);
    assert_eq!(
        app.graphql(Some(&member), read, json!({}))
            .await
            .error_code(),
        "FORBIDDEN"
    );

    let task = run_agent(&app, json!({"tools": ["test.lookup"]}), "Go on and on.").await;
    assert_eq!(task["result"]["finishReason"], "ITERATION_LIMIT");
    assert_eq!(
        script.requests().len(),
        2,
        "the tenant's limit, not the platform's"
    );
    let audit = app
        .graphql(
            Some(&token),
            "{ auditLog(filter: {actionPrefix: \"executor_policy.\"}, first: 5) { edges { node { action } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        audit.data()["auditLog"]["edges"].as_array().unwrap().len(),
        1
    );
}

/// The tenant's plans are tools too: a call of `plan_<key>` runs the plan
/// as a child task and answers with its outcome.
async fn a_plan_is_offered_as_a_tool_and_runs_as_a_child_task(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("plan_note", r#"{"input": "buy milk"}"#.into())]),
        Turn::Text(vec!["Noted."]),
    ])
    .await;
    // Two workers: one waits in the parent's call step while the other
    // runs the child.
    let app = TestApp::spawn_with(backend, |c| {
        crate::llm::use_fake(c, &url);
        c.workers = 2;
    })
    .await;
    app.create_tenant("acme").await;
    app.publish_plan(
        "acme",
        json!({"key": "note", "intent": "notes.take", "description": "Write a note down.",
               "steps": [{"id": "write", "tool": "set_state", "args": {"noted": "{{ input.text }}"}}]}),
    )
    .await
    .data();
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "test.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": {"tools": ["plan.note", "plan.assist"]}}]}),
    )
    .await
    .data();
    let started = app
        .graphql(
            Some(&app.admin_token("acme")),
            "mutation { startTask(input: {planKey: \"assist\", input: \"Remember milk.\", mode: ENQUEUE_AND_WAIT}) { ok task { id result { content } steps { stepId tool status } } } }",
            json!({}),
        )
        .await;
    let payload = &started.data()["startTask"];
    assert_eq!(payload["ok"], true, "{payload}");
    assert_eq!(payload["task"]["result"]["content"], "Noted.");
    assert_eq!(payload["task"]["steps"][1]["tool"], "plan.run");

    let requests = script.requests();
    assert_eq!(
        tool_names(&requests[0]),
        ["plan_note"],
        "a plan with an agent step is never offered"
    );
    let (_, outcome) = &tool_messages(&requests[1])[0];
    assert_eq!(outcome["plan"], "note");
    assert_eq!(outcome["status"], "COMPLETED");
    assert_eq!(outcome["settled"], true);
    assert_eq!(outcome["state"]["noted"], "buy milk");
    let child = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { children(first: 10) { nodes { plan { key } status } } } }",
            json!({"id": payload["task"]["id"]}),
        )
        .await;
    assert_eq!(
        child.data()["task"]["children"]["nodes"],
        json!([{"plan": {"key": "note"}, "status": "COMPLETED"}])
    );
}

/// A partner tool of a capability the tenant does not subscribe to is
/// neither offered nor run; once it subscribes, the tool is offered.
async fn a_partner_tool_without_a_subscription_is_refused(backend: Backend) {
    let (script, url) = fake_model(vec![
        Turn::Calls(vec![("partner_quote", r#"{"vehicles": 3}"#.into())]),
        Turn::Text(vec!["I cannot quote."]),
        Turn::Text(vec!["Offered now."]),
    ])
    .await;
    let (app, _) = app_on(backend, &url).await;
    // The partner's URL is the fake model's: nothing may reach it.
    let capability = json!({
        "key": "fleet.quotes", "name": "Fleet Quotes",
        "tools": [{"key": "partner.quote", "description": "Quote a fleet.",
                   "url": format!("{url}/quote"), "inputSchema": {"type": "object"},
                   "timeoutMs": 2000}],
        "plans": [],
    });
    crate::capabilities::publish_capability(&app, capability)
        .await
        .data();
    let task = run_agent(&app, json!({}), "Quote three trucks.").await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let requests = script.requests();
    assert!(
        !tool_names(&requests[0]).contains(&"partner_quote".to_owned()),
        "{:?}",
        tool_names(&requests[0])
    );
    let (_, refused) = &tool_messages(&requests[1])[0];
    assert_eq!(refused["error"]["code"], "TOOL_NOT_FOUND");
    assert_eq!(step_ids(&task), ["answer", "answer:2"], "no call step ran");
    assert_eq!(requests.len(), 2, "the partner was never called");

    crate::capabilities::subscribe(&app, "acme", "fleet.quotes", None)
        .await
        .data();
    run_agent(&app, json!({}), "And now?").await;
    assert!(tool_names(&script.requests()[2]).contains(&"partner_quote".to_owned()));
}

/// Every model call of a loop passes the token budget first: a budget the
/// first call could exceed stops the task before any request.
async fn a_budget_stops_the_loop_before_the_model_is_called(backend: Backend) {
    let (script, url) = fake_model(vec![Turn::Text(vec!["too late"])]).await;
    let (app, _) = app_on(backend, &url).await;
    let task = run_agent(&app, json!({"max_task_tokens": 50}), "Answer at length.").await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert!(
        task["error"].as_str().unwrap().contains("BUDGET_EXCEEDED"),
        "{task}"
    );
    assert!(script.requests().is_empty(), "no request was sent");
}
