//! The agent evaluation: how often the local language model does the right
//! thing as an agent, over the cases of `bench/agent_eval.json` (45: answer
//! from memory, remember a fact then answer from it in a new task, call the
//! order service through `http_request` with the right URL, answer without
//! a tool when none is needed, and recall an earlier turn of a
//! conversation). Prints each case's verdict and time, then the pass rate
//! per kind and overall.
//!
//! Everything runs through a real server in this process on an embedded
//! SQLite file: GraphQL over HTTP, the executor, the agent loop, the
//! memory tools with the local embedder, and a local order service on
//! 127.0.0.1 that records the paths asked for. Which model answers is the
//! server's choice for `--provider`: `local` is the agent model when
//! `--models-dir` holds it (`models fetch --agent`), else SmolLM2;
//! `offline` is the built-in deterministic model.
//!
//! A case passes when every `expect` entry (alternatives split by `|`)
//! appears in its final answer, ignoring case, and, by kind: `remember`
//! stored the fact with `memory.remember` in its first task; `http` asked
//! the order service for its order; `no_tool` ran no tool at all. A
//! `memory` case's facts are known only to the tenant's memories, which
//! reach the model through `memory.recall` or the memories the platform
//! puts in its prompt; its verdict notes which. `conversation` cases run a
//! plan that offers no tools, so only the conversation's history can hold
//! the answer. The tenant's plan says, as a tenant would, which source
//! answers which question (its `system`) and what each tool is for
//! (`tool_descriptions`).
//!
//! ```text
//! cargo run --release -p brainstem-bench --bin agent_eval -- \
//!     --models-dir /var/tmp/brainstem-cache/models-agent
//! ```

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use axum::{
    Json, Router,
    extract::{Path, State},
    http::{StatusCode, Uri},
    routing::get,
};
use brainstem::{
    config::{Config, EmbeddingProvider, LlmProvider},
    startup::Application,
};
use brainstem_bench::bench_token;
use brainstem_domain::{Actor, Principal, Role};
use clap::{Parser, ValueEnum};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
#[command(about = "Run the agent evaluation set against a local model")]
struct Args {
    /// A directory filled by `brainstem models fetch` (and `--agent`).
    #[arg(long, env = "BRAINSTEM_MODELS_DIR", default_value = "models")]
    models_dir: PathBuf,
    /// Which language model answers.
    #[arg(long, value_enum, default_value_t = Provider::Local)]
    provider: Provider,
    /// The evaluation set.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/agent_eval.json"))]
    cases: PathBuf,
    /// Only the cases of these kinds (memory, remember, http, no_tool,
    /// conversation).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Print each turn's answer.
    #[arg(long)]
    verbose: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Provider {
    Local,
    Offline,
}

#[derive(Deserialize)]
struct Set {
    memories: Vec<String>,
    orders: BTreeMap<String, Value>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    id: String,
    kind: String,
    turns: Vec<String>,
    expect: Vec<String>,
    #[serde(default)]
    order: Option<String>,
}

/// The order service: answers `GET /orders/{number}` from the set's orders
/// and records every path it was asked for.
#[derive(Clone)]
struct Orders {
    orders: Arc<BTreeMap<String, Value>>,
    asked: Arc<Mutex<Vec<String>>>,
}

async fn order(
    State(service): State<Orders>,
    uri: Uri,
    Path(number): Path<String>,
) -> Result<Json<Value>, StatusCode> {
    if let Ok(mut asked) = service.asked.lock() {
        asked.push(uri.path().to_owned());
    }
    let found = service.orders.get(&number).ok_or(StatusCode::NOT_FOUND)?;
    let mut body = found.clone();
    body["order"] = json!(number);
    Ok(Json(body))
}

/// One GraphQL operation over HTTP; a GraphQL error is an error.
async fn gql(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    variables: Value,
) -> anyhow::Result<Value> {
    let body: Value = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({"query": query, "variables": variables}))
        .send()
        .await?
        .json()
        .await?;
    if body.get("errors").is_some() {
        bail!("{body}");
    }
    Ok(body["data"].clone())
}

/// The server under evaluation and a member's token of its tenant.
struct Server {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Server {
    async fn call(&self, query: &str, variables: Value) -> anyhow::Result<Value> {
        gql(&self.http, &self.url, &self.token, query, variables).await
    }

    /// Start a task of `plan` with `input` (in `conversation` if given),
    /// wait until it ends, and return it with its steps.
    async fn run(
        &self,
        plan: &str,
        input: &str,
        conversation: Option<&str>,
    ) -> anyhow::Result<Value> {
        let started = self
            .call(
                "mutation($input: StartTaskInput!) { startTask(input: $input) { task { id } } }",
                json!({"input": {"planKey": plan, "input": input, "conversationId": conversation}}),
            )
            .await?;
        let id = started["startTask"]["task"]["id"].clone();
        loop {
            let read = self
                .call(
                    "query($id: ID!) { task(id: $id) { status error \
                     result { content model } steps { tool status } } }",
                    json!({"id": id}),
                )
                .await?;
            let task = read["task"].clone();
            match task["status"].as_str() {
                Some("COMPLETED" | "FAILED" | "CANCELLED") => return Ok(task),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// The tools an agent step ran, and whether each completed.
fn tools_run(task: &Value) -> Vec<(String, bool)> {
    task["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["tool"] != "agent")
        .map(|s| {
            (
                s["tool"].as_str().unwrap_or_default().to_owned(),
                s["status"] == "COMPLETED",
            )
        })
        .collect()
}

fn ran(task: &Value, tool: &str) -> bool {
    tools_run(task).iter().any(|(t, done)| t == tool && *done)
}

fn answer(task: &Value) -> String {
    task["result"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether every expectation (alternatives split by `|`) is in `answer`.
fn expected(answer: &str, expect: &[String]) -> bool {
    let answer = answer.to_lowercase();
    expect.iter().all(|e| {
        e.split('|')
            .any(|alternative| answer.contains(&alternative.to_lowercase()))
    })
}

/// Run one case; its verdict and, when it failed, why.
async fn run_case(
    server: &Server,
    orders: &Orders,
    case: &Case,
    verbose: bool,
) -> anyhow::Result<(bool, String)> {
    let mut tasks = Vec::new();
    let conversation = if case.kind == "conversation" {
        let started = server
            .call(
                "mutation { startConversation(input: {title: \"Evaluation\"}) { conversation { id } } }",
                json!({}),
            )
            .await?;
        started["startConversation"]["conversation"]["id"]
            .as_str()
            .map(str::to_owned)
    } else {
        None
    };
    let plan = if case.kind == "conversation" {
        "chat"
    } else {
        "assist"
    };
    if let Ok(mut asked) = orders.asked.lock() {
        asked.clear();
    }
    for turn in &case.turns {
        let task = server.run(plan, turn, conversation.as_deref()).await?;
        if verbose {
            println!(
                "    {turn:?} -> {:?} tools {:?}",
                answer(&task),
                tools_run(&task)
            );
        }
        tasks.push(task);
    }
    let last = tasks.last().context("a case has turns")?;
    if last["status"] != "COMPLETED" {
        return Ok((false, format!("task {}: {}", last["status"], last["error"])));
    }
    let text = answer(last);
    if !expected(&text, &case.expect) {
        return Ok((false, format!("answer {text:?} lacks {:?}", case.expect)));
    }
    let tool_rule = match case.kind.as_str() {
        "remember" => ran(&tasks[0], "memory.remember")
            .then_some(())
            .ok_or("the fact was not remembered"),
        "http" => {
            let want = format!("/orders/{}", case.order.as_deref().unwrap_or_default());
            let asked = orders.asked.lock().map(|a| a.clone()).unwrap_or_default();
            asked
                .contains(&want)
                .then_some(())
                .ok_or("the order service was not asked for the order")
        }
        "no_tool" => tools_run(last)
            .is_empty()
            .then_some(())
            .ok_or("a tool was called"),
        _ => Ok(()),
    };
    Ok(match tool_rule {
        Ok(()) if case.kind == "memory" && !ran(last, "memory.recall") => {
            (true, "(from the prompt's memories, no recall)".to_owned())
        }
        Ok(()) => (true, String::new()),
        Err(why) => (false, why.to_owned()),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let set: Set = serde_json::from_str(&std::fs::read_to_string(&args.cases)?)
        .with_context(|| format!("reading {}", args.cases.display()))?;

    let orders = Orders {
        orders: Arc::new(set.orders.clone()),
        asked: Arc::default(),
    };
    let service = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let service_url = format!("http://{}", service.local_addr()?);
    let router = Router::new()
        .route("/orders/{number}", get(order))
        .with_state(orders.clone());
    tokio::spawn(async move { axum::serve(service, router).await });

    let dir =
        std::env::temp_dir().join(format!("brainstem-eval-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    let jwt_secret = uuid::Uuid::now_v7().to_string();
    let config = Config {
        bind: "127.0.0.1:0".into(),
        database_url: format!("sqlite://{}", dir.join("eval.db").display()),
        jwt_secret: Some(secrecy::SecretString::from(jwt_secret)),
        llm_provider: match args.provider {
            Provider::Local => LlmProvider::Local,
            Provider::Offline => LlmProvider::Offline,
        },
        embedding_provider: match args.provider {
            Provider::Local => EmbeddingProvider::Local,
            Provider::Offline => EmbeddingProvider::Offline,
        },
        models_dir: args.models_dir.clone(),
        http_allowed_hosts: vec!["127.0.0.1:*".into()],
        http_allowed_private: vec!["127.0.0.1/32".into()],
        rate_limit_per_key_rps: 0.0,
        rate_limit_per_tenant_rps: 0.0,
        task_timeout_secs: 900,
        log: "error".into(),
        ..Config::default()
    };
    brainstem::telemetry::init(&config);
    let app = Application::build(&config).await?;
    let url = format!("http://{}/graphql", app.local_addr());
    let domain = app.domain().clone();
    let auth = brainstem::startup::auth_config(&config, &domain).await?;
    tokio::spawn(app.run_until(std::future::pending()));

    let root = Principal {
        actor: Actor::User("eval".into()),
        tenant: None,
        roles: [Role::PlatformAdmin].into(),
        scopes: Default::default(),
    };
    let scope = domain
        .audit
        .open_platform_scope(&root, "tenant.create", "eval", None)
        .await?;
    domain.tenants.create(&scope, "eval", "Evaluation").await?;
    let server = Server {
        http: reqwest::Client::new(),
        url,
        token: bench_token(&auth, Some("eval"), Role::TenantAdmin)?,
    };
    // What a tenant would write: which source answers which question.
    let system = format!(
        "You are the operations assistant of a logistics company.\n\
         - Questions about an order: call http_request with \
         {{\"url\": \"{service_url}/orders/<number>\"}}; it answers with the order as JSON.\n\
         - Questions about people, sites, customers and company policies: call memory.recall.\n\
         - When the user asks you to remember or note a fact: call memory.remember with the fact as content.\n\
         - Anything else: answer directly, without a tool.\n\
         Answer in one short sentence."
    );
    // And what each tool is for, in the tenant's words.
    let descriptions = json!({
        "memory.recall": "Search what the company knows about its people, sites, customers \
                          and policies. Knows nothing about orders.",
        "memory.remember": "Store a fact the user asks you to remember or note.",
        "http_request": format!(
            "Look up an order at the order service: {{\"url\": \"{service_url}/orders/<number>\"}}. \
             It answers with the order's status, carrier, total and expected arrival."
        ),
    });
    for (key, tools, system) in [
        (
            "assist",
            json!(["memory.recall", "memory.remember", "http_request"]),
            system.as_str(),
        ),
        ("chat", json!([]), "Answer in one short sentence."),
    ] {
        let descriptions = match key {
            "assist" => descriptions.clone(),
            _ => json!({}),
        };
        server
            .call(
                "mutation($input: PublishPlanInput!) { publishPlan(input: $input) { plan { id } } }",
                json!({"input": {"key": key, "intent": format!("eval.{key}"), "steps": [
                    {"id": "answer", "tool": "agent", "args": {
                        "system": system, "tools": tools, "tool_descriptions": descriptions,
                        "temperature": 0, "max_tokens": 120}}]}}),
            )
            .await?;
    }
    for content in &set.memories {
        server
            .call(
                "mutation($input: RememberInput!) { remember(input: $input) { memory { id } } }",
                json!({"input": {"content": content}}),
            )
            .await?;
    }

    let cases: Vec<&Case> = set
        .cases
        .iter()
        .filter(|c| args.kinds.is_empty() || args.kinds.contains(&c.kind))
        .collect();
    let mut model = String::new();
    let mut per_kind: BTreeMap<&str, (usize, usize, Duration)> = BTreeMap::new();
    let mut times = Vec::new();
    println!("{:<22} {:<13} {:>8}  verdict", "case", "kind", "seconds");
    for case in &cases {
        let started = Instant::now();
        let (passed, why) = run_case(&server, &orders, case, args.verbose).await?;
        let took = started.elapsed();
        times.push(took);
        let entry = per_kind.entry(case.kind.as_str()).or_default();
        entry.0 += usize::from(passed);
        entry.1 += 1;
        entry.2 += took;
        println!(
            "{:<22} {:<13} {:>8.1}  {}{}",
            case.id,
            case.kind,
            took.as_secs_f64(),
            if passed { "pass " } else { "FAIL " },
            why
        );
        if model.is_empty() {
            model = server
                .call(
                    "query { tasks(last: 1) { nodes { result { model } } } }",
                    json!({}),
                )
                .await?["tasks"]["nodes"][0]["result"]["model"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
    }
    times.sort();
    let passed: usize = per_kind.values().map(|k| k.0).sum();
    println!("\nmodel: {model}");
    for (kind, (ok, n, took)) in &per_kind {
        println!(
            "{kind:<13} {ok:>3}/{n:<3} {:>5.1} %  {:>6.1} s per case",
            100.0 * *ok as f64 / *n as f64,
            took.as_secs_f64() / *n as f64
        );
    }
    println!(
        "all           {passed:>3}/{:<3} {:>5.1} %  p50 {:.1} s, max {:.1} s per case",
        cases.len(),
        100.0 * passed as f64 / cases.len().max(1) as f64,
        brainstem_bench::percentile(&times, 50.0).as_secs_f64(),
        times.last().copied().unwrap_or_default().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
