//! The agent model (Qwen2.5-Coder-1.5B-Instruct) on its real file, through
//! the real server: an agent step that must look a fact up in the
//! tenant's memories does so with a tool call the model writes as text,
//! and answers from what the tool returned.
//!
//! The directory comes from `BRAINSTEM_TEST_AGENT_MODELS_DIR`, else
//! `$BRAINSTEM_CACHE_DIR/models-agent`, else
//! `/var/tmp/brainstem-cache/models-agent`; `scripts/test` fetches it there
//! (`brainstem models fetch --agent`, 1.1 GB, once). Each test runs on the
//! embedded SQLite only: what is tested is the model and the agent loop,
//! and a run takes tens of seconds of both cores. One test drives the model
//! directly: a prompt that shares the last one's beginning reads only the
//! rest.

use std::path::PathBuf;

use brainstem::config::{EmbeddingProvider, LlmProvider};
use brainstem_domain::{
    llm::{Chunk, CompletionRequest, LanguageModel, Message, TokenUsage, ToolSpec, prompt},
    models::local::{ModelFiles, qwen},
};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::{
    helpers::{Backend, TestApp},
    memory::{member, remember_id},
};

fn agent_models() -> ModelFiles {
    let dir = std::env::var_os("BRAINSTEM_TEST_AGENT_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("BRAINSTEM_CACHE_DIR").map(|d| PathBuf::from(d).join("models-agent"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/tmp/brainstem-cache/models-agent"));
    match ModelFiles::find(&dir) {
        Some(files) if files.has_agent() => files,
        _ => panic!(
            "no agent model in {}: run scripts/test, or `cargo run -- models fetch --agent --dir {}`",
            dir.display(),
            dir.display()
        ),
    }
}

async fn app() -> TestApp {
    let dir = agent_models().dir;
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.llm_provider = LlmProvider::Local;
        c.embedding_provider = EmbeddingProvider::Local;
        c.models_dir = dir;
        // A CPU model on a busy machine: minutes, not the defaults' two.
        c.task_timeout_secs = 900;
    })
    .await;
    app.create_tenant("acme").await;
    app
}

/// Publish a one-step agent plan with `args`, ask it what Maria Lopez is
/// allergic to, run it, and read the task back.
async fn ask_maria(app: &TestApp, args: Value) -> Value {
    app.publish_plan(
        "acme",
        json!({"key": "assist", "intent": "test.assist",
               "steps": [{"id": "answer", "tool": "agent", "args": args}]}),
    )
    .await
    .data();
    let id = app
        .start_task(
            "acme",
            json!({"planKey": "assist", "input": "What is Maria Lopez allergic to?"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.run_tasks().await;
    let task = app
        .graphql(
            Some(&app.admin_token("acme")),
            "query($id: ID!) { task(id: $id) { status error \
             result { content model toolCalls iterations } steps { stepId tool status output } } }",
            json!({"id": id}),
        )
        .await
        .data()["task"]
        .clone();
    println!("{task:#}");
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_step_answers_from_memory_through_a_tool_call() {
    let app = app().await;
    let t = member(&app, "acme");
    for fact in [
        "Maria Lopez is allergic to penicillin.",
        "The Leeds depot opens at six in the morning.",
        "Invoices over 10,000 euros need the finance director's approval.",
        "Tom Becker prefers to be contacted by email.",
    ] {
        remember_id(&app, &t, json!({"content": fact})).await;
    }
    let task = ask_maria(
        &app,
        json!({"tools": ["memory.recall"], "temperature": 0, "max_tokens": 120}),
    )
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    assert_eq!(
        task["result"]["model"], "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "{task}"
    );
    let steps = task["steps"].as_array().unwrap();
    let recalls: Vec<&Value> = steps
        .iter()
        .filter(|s| s["tool"] == "memory.recall")
        .collect();
    assert!(!recalls.is_empty(), "the model called no tool: {task}");
    assert!(recalls.iter().all(|s| s["status"] == "COMPLETED"), "{task}");
    assert!(
        recalls
            .iter()
            .any(|s| s["output"].to_string().contains("penicillin")),
        "the recall did not find the fact: {task}"
    );
    let answer = task["result"]["content"].as_str().unwrap_or_default();
    assert!(
        answer.to_lowercase().contains("penicillin"),
        "answer: {answer:?}"
    );
    // The agent model is weak at chaining calls: the answering step says
    // it ran one hop.
    let last = steps.iter().rev().find(|s| s["tool"] == "agent").unwrap();
    assert_eq!(last["output"]["one_hop"], true, "{task}");
}

/// Run one turn of `conversation` through the `chat` plan; its answer.
async fn turn(app: &TestApp, token: &str, conversation: &str, input: &str) -> String {
    let started = app
        .graphql(
            Some(token),
            "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }",
            json!({"input": {"planKey": "chat", "input": input, "conversationId": conversation}}),
        )
        .await;
    let id = started.data()["startTask"]["task"]["id"].clone();
    app.run_tasks().await;
    let read = app
        .graphql(
            Some(token),
            "query($id: ID!) { task(id: $id) { status error result { content } } }",
            json!({"id": id}),
        )
        .await;
    let task = read.data()["task"].clone();
    assert_eq!(task["status"], "COMPLETED", "{task}");
    println!("{input:?} -> {}", task["result"]["content"]);
    task["result"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_third_turn_of_a_conversation_uses_the_first_turns_fact() {
    let app = app().await;
    app.publish_plan(
        "acme",
        json!({"key": "chat", "intent": "chat.reply",
               "steps": [{"id": "answer", "tool": "agent", "args": {
                   "system": "Answer in one short sentence.", "tools": [],
                   "temperature": 0, "max_tokens": 60}}]}),
    )
    .await
    .data();
    let t = member(&app, "acme");
    let conversation = app.start_conversation(&t, "Badges").await;
    turn(
        &app,
        &t,
        &conversation,
        "Note this: Priya's badge number is 4417.",
    )
    .await;
    turn(&app, &t, &conversation, "What is the capital of Italy?").await;
    let answer = turn(&app, &t, &conversation, "What is Priya's badge number?").await;
    assert!(answer.contains("4417"), "third turn: {answer:?}");
}

/// The model's licence and notice travel with it: a copy fetched before
/// they were written gets them from the next `models fetch --agent`, which
/// downloads nothing since the model is there.
#[test]
fn the_agent_model_carries_its_licence_and_notice() {
    let fetched = agent_models();
    let copy = tempfile::tempdir().expect("temporary directory");
    let files = ModelFiles::at(copy.path());
    std::fs::create_dir_all(files.agent_dir()).expect("agent directory");
    std::fs::hard_link(fetched.agent_gguf(), files.agent_gguf()).expect("link the model");
    std::fs::copy(
        fetched.agent_dir().join("COMPLETE"),
        files.agent_dir().join("COMPLETE"),
    )
    .expect("copy the marker");
    assert!(!files.agent_dir().join("LICENSE").exists());

    let lines = std::sync::Mutex::new(Vec::new());
    brainstem_domain::models::local::agent_fetch::fetch_agent(copy.path(), None, &|line| {
        lines.lock().expect("lines").push(line.to_owned())
    })
    .expect("fetch of a present model");

    let lines = lines.into_inner().expect("lines");
    assert!(
        lines.iter().any(|l| l.contains("already present")),
        "{lines:?}"
    );
    let licence = std::fs::read_to_string(files.agent_dir().join("LICENSE")).expect("LICENSE");
    assert!(licence.contains("Apache License") && licence.contains("Version 2.0"));
    let notice = std::fs::read_to_string(files.agent_dir().join("NOTICE")).expect("NOTICE");
    assert!(notice.contains("Qwen2.5-Coder"), "{notice}");
}

/// What a model call streamed (text and calls), and its usage.
async fn answer(
    model: &dyn LanguageModel,
    request: &CompletionRequest,
) -> (Vec<Chunk>, TokenUsage) {
    let mut stream = model
        .stream(request)
        .await
        .expect("the model takes the call");
    let (mut chunks, mut usage) = (Vec::new(), None);
    while let Some(chunk) = stream.next().await {
        match chunk.expect("a chunk") {
            Chunk::Usage(u) => usage = Some(u),
            chunk => chunks.push(chunk),
        }
    }
    (chunks, usage.expect("usage reported"))
}

/// An agent's prompts share their beginning (the platform's rules, the
/// tools): the model keeps what a prompt shares with the last one and
/// reads only the rest, and answers exactly as from a fresh read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sharing_the_last_ones_beginning_reads_only_the_rest() {
    let files = agent_models();
    let model = tokio::task::spawn_blocking(move || qwen::load(&files))
        .await
        .expect("the loading thread")
        .expect("the agent model loads");
    let tools = vec![
        ToolSpec {
            name: "memory_recall".into(),
            description: "Find what the tenant's memories say about a question.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}},
                               "required": ["query"]}),
        },
        ToolSpec {
            name: "memory_remember".into(),
            description: "Store a fact in the tenant's memories.".into(),
            parameters: json!({"type": "object", "properties": {"content": {"type": "string"}},
                               "required": ["content"]}),
        },
    ];
    let ask = |question: &str| CompletionRequest {
        messages: prompt::for_call(
            vec![
                Message::system(prompt::IMMUTABLE_CORE),
                Message::user(question),
            ],
            true,
        ),
        model: qwen::model_name().into(),
        max_tokens: 40,
        temperature: 0.0,
        tools: tools.clone(),
    };
    let unrelated = CompletionRequest {
        messages: vec![Message::user("Say hello.")],
        max_tokens: 4,
        tools: Vec::new(),
        ..ask("")
    };
    let question = "Remember that the Berlin office closes at 6pm on Fridays.";

    let (_, cold) = answer(&model, &ask("What is Maria Lopez allergic to?")).await;
    let (cached, usage) = answer(&model, &ask(question)).await;
    assert!(cold.cached_input_tokens < 8, "first read: {cold:?}");
    assert!(
        usage.input_tokens - usage.cached_input_tokens < 40,
        "only the question is read again: {usage:?}"
    );

    answer(&model, &unrelated).await;
    let (fresh, fresh_usage) = answer(&model, &ask(question)).await;
    assert!(fresh_usage.cached_input_tokens < 8, "{fresh_usage:?}");
    assert_eq!(fresh_usage.input_tokens, usage.input_tokens);
    assert_eq!(cached, fresh, "the same answer as from a fresh read");
    assert!(
        cached.iter().any(|c| matches!(c, Chunk::ToolCall(_))),
        "a call to remember the fact: {cached:?}"
    );

    // The same prompt again reads only its last token.
    let (again, again_usage) = answer(&model, &ask(question)).await;
    assert_eq!(
        again_usage.cached_input_tokens,
        again_usage.input_tokens - 1
    );
    assert_eq!(again, fresh);
}

/// A call is written to the offered tools' schemas: asked to use a tool
/// by another name with other arguments, the model still calls the tool
/// offered, with its parameters, of their types, the required one there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_held_to_the_offered_tools_schema_while_it_is_written() {
    let files = agent_models();
    let model = tokio::task::spawn_blocking(move || qwen::load(&files))
        .await
        .expect("the loading thread")
        .expect("the agent model loads");
    let request = CompletionRequest {
        messages: vec![Message::user(
            "Call get_weather with {\"location\": \"Paris\", \"unit\": \"C\", \"days\": 3}.",
        )],
        model: qwen::model_name().into(),
        max_tokens: 60,
        temperature: 0.0,
        tools: vec![ToolSpec {
            name: "weather_lookup".into(),
            description: "The weather in a city.".into(),
            parameters: json!({"type": "object", "required": ["city"], "properties": {
                "city": {"type": "string"},
                "units": {"enum": ["celsius", "fahrenheit"]}}}),
        }],
    };
    let (chunks, _) = answer(&model, &request).await;
    let calls: Vec<_> = chunks
        .iter()
        .filter_map(|c| match c {
            Chunk::ToolCall(call) => Some(call),
            _ => None,
        })
        .collect();
    assert!(!calls.is_empty(), "a call: {chunks:?}");
    for call in calls {
        assert_eq!(call.name.as_deref(), Some("weather_lookup"), "{chunks:?}");
        let arguments: Value = serde_json::from_str(&call.arguments).expect("JSON arguments");
        let arguments = arguments.as_object().expect("an object");
        assert!(
            arguments["city"]
                .as_str()
                .is_some_and(|c| c.contains("Paris")),
            "{arguments:?}"
        );
        for (key, value) in arguments {
            match key.as_str() {
                "city" => {}
                "units" => assert!(
                    matches!(value.as_str(), Some("celsius" | "fahrenheit")),
                    "{arguments:?}"
                ),
                other => panic!("an argument the tool does not take: {other} in {arguments:?}"),
            }
        }
    }
}

/// A call the model cannot finish (its token budget ends inside it) does
/// not fail the task: it is closed and checked like any call, refused and
/// told to the model if it is still wrong, or kept as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_short_does_not_fail_the_task() {
    let app = app().await;
    let task = ask_maria(
        &app,
        json!({"tools": ["memory.recall"], "temperature": 0, "max_tokens": 14,
               "max_iterations": 2}),
    )
    .await;
    assert_eq!(task["status"], "COMPLETED", "{task}");
    let steps = task["steps"].as_array().unwrap();
    assert!(
        steps.iter().all(|s| s["status"] == "COMPLETED"),
        "no step failed: {task}"
    );
    assert!(
        steps.iter().all(|s| s["tool"] != "memory.recall"),
        "a call with no query never runs: {task}"
    );
}
