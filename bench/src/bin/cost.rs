//! `cost`: what the document limits cost per request, against the request.
//!
//! Every GraphQL request pays for `brainstem_api::cost`: a scan of its text
//! and a walk of its parsed document. This benchmark shows that this is
//! negligible beside the request, and that a hostile document is refused in
//! about the time it takes to read it. For each document it prints its size,
//! tokens and cost, the median time of each step of the pass (scan, parse,
//! measure; timed over `--iterations` runs inside the real schema, against
//! its registry), and the median latency of the whole request against a real
//! server over HTTP (`--requests` sequential requests), with the pass's share
//! of it. The server is built in this process on an embedded SQLite database
//! (the pass does not touch the database) with `--tasks` finished four-step
//! tasks, so the dashboard query reads a full page.
//!
//! Documents: the dashboard's nested page (`tasks(first: 50)` with steps and
//! the last five events), the introspection query of GraphiQL and codegen
//! tools, a large legitimate query (eight aliased dashboard pages through one
//! fragment) and the hostile fragment fan-out (10^10 fields once expanded),
//! which is refused.
//!
//! ```sh
//! cargo run --release -p brainstem-bench --bin cost
//! ```

// The schema's executor is instantiated in this crate (`Schema::execute`
// on the whole query root); its future's layout nests deeper than the
// default limit of 128 in a release build.
#![recursion_limit = "256"]

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use async_graphql::{
    Request, ServerError, ServerResult, Variables,
    extensions::{Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest},
};
use brainstem_api::cost::{self, DocumentLimits};
use brainstem_bench::{api_config, ms, percentile, seed_four_step_tasks, serve};
use clap::Parser;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(about = "What the GraphQL document limits cost per request")]
struct Args {
    /// Timed runs of each step of the pass, per document.
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Sequential requests per document against the server.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// Finished tasks to seed.
    #[arg(long, default_value_t = 60)]
    tasks: usize,
}

const DASHBOARD: &str = "{ tasks(first: 50) { edges { node { \
    id status plan { key version } \
    steps { stepId status attempt durationMs } \
    events(last: 5) { seq kind summary } } } } }";

const INTROSPECTION: &str = include_str!("../../../tests/fixtures/introspection.graphql");

/// Eight dashboard pages, one per status filter, through one fragment.
fn large() -> String {
    let statuses = [
        "PENDING",
        "EXECUTING",
        "NEEDS_REVIEW",
        "DELEGATED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "PLANNING",
    ];
    let mut q = String::from("query Board {");
    for status in statuses {
        q.push_str(&format!(
            " {}: tasks(first: 50, filter: {{ statuses: [{status}] }}) {{ ...Page }}",
            status.to_lowercase()
        ));
    }
    q.push_str(
        " } fragment Page on TaskConnection { edges { node { id status plan { key version } \
         steps { stepId status attempt durationMs } events(last: 5) { seq kind summary } } } }",
    );
    q
}

/// Ten fragments of ten spreads each over one selecting `__typename`:
/// 10^10 fields once expanded.
fn fan_out() -> String {
    let mut q = String::from("query Q { ...F10 } fragment F0 on Query { __typename }");
    for k in 1..=10 {
        let spreads = format!("...F{} ", k - 1).repeat(10);
        q.push_str(&format!(" fragment F{k} on Query {{ {spreads}}}"));
    }
    q
}

/// Median times of the pass's steps for one document.
#[derive(Clone, Copy, Debug, Default)]
struct PassTimes {
    tokens: usize,
    cost: u64,
    scan: Duration,
    parse: Duration,
    measure: Duration,
}

/// Times the pass inside the schema (the registry is only reachable from
/// an extension), then stops the request.
struct TimePass {
    iterations: usize,
    out: Arc<Mutex<Option<anyhow::Result<PassTimes>>>>,
}

impl ExtensionFactory for TimePass {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(TimePass {
            iterations: self.iterations,
            out: self.out.clone(),
        })
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for TimePass {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        _next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let times = time_pass(
            &request.query,
            &ctx.schema_env.registry,
            &request.variables,
            self.iterations,
        );
        if let Ok(mut out) = self.out.lock() {
            *out = Some(times);
        }
        Err(ServerError::new("timed", None))
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    percentile(&samples, 50.0)
}

fn time_pass(
    query: &str,
    registry: &async_graphql::registry::Registry,
    variables: &Variables,
    iterations: usize,
) -> anyhow::Result<PassTimes> {
    // Limits as high as they go: the pass does all its work.
    let limits = DocumentLimits {
        max_cost: u64::MAX,
        max_cost_anonymous: u64::MAX,
        ..DocumentLimits::default()
    };
    let (mut scans, mut parses, mut measures) = (Vec::new(), Vec::new(), Vec::new());
    let mut found = PassTimes::default();
    for _ in 0..iterations {
        let started = Instant::now();
        let scan = cost::scan(query, &limits).map_err(|r| anyhow::anyhow!(r.0))?;
        scans.push(started.elapsed());
        let started = Instant::now();
        let doc = async_graphql::parser::parse_query(query)?;
        parses.push(started.elapsed());
        let started = Instant::now();
        let cost =
            cost::measure(&doc, registry, variables, &limits).map_err(|r| anyhow::anyhow!(r.0))?;
        measures.push(started.elapsed());
        found.tokens = scan.tokens;
        found.cost = cost;
    }
    found.scan = median(scans);
    found.parse = median(parses);
    found.measure = median(measures);
    Ok(found)
}

async fn pass_times(query: &str, iterations: usize) -> anyhow::Result<PassTimes> {
    let out = Arc::new(Mutex::new(None));
    let schema = brainstem_api::schema::bare()
        .extension(TimePass {
            iterations,
            out: out.clone(),
        })
        .finish();
    schema.execute(Request::new(query)).await;
    let taken = out.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.take();
    taken.context("the pass was not timed")?
}

/// Median latency of `requests` sequential requests; each answer must have
/// data without errors, or (`refused`) be a `BAD_USER_INPUT` refusal.
async fn request_latency(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    requests: usize,
    refused: bool,
) -> anyhow::Result<Duration> {
    let mut latencies = Vec::with_capacity(requests);
    for _ in 0..requests {
        let started = Instant::now();
        let response = http
            .post(url)
            .bearer_auth(token)
            .json(&json!({"query": query}))
            .send()
            .await?;
        let body: serde_json::Value = response.json().await?;
        latencies.push(started.elapsed());
        let code = body["errors"][0]["extensions"]["code"].as_str();
        match (refused, code) {
            (false, None) if body["data"].is_object() => {}
            (true, Some("BAD_USER_INPUT")) => {}
            _ => bail!("unexpected answer: {body}"),
        }
    }
    Ok(median(latencies))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("brainstem-cost-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir)?;
    let result = run(
        &args,
        &format!("sqlite://{}", dir.join("bench.db").display()),
    )
    .await;
    std::fs::remove_dir_all(&dir)?;
    result
}

async fn run(args: &Args, database_url: &str) -> anyhow::Result<()> {
    let served = serve(&api_config(database_url)).await?;
    let (url, platform, admin) = (
        served.url.as_str(),
        served.platform.as_str(),
        served.admin.as_str(),
    );
    let http = reqwest::Client::new();
    seed_four_step_tasks(&http, url, platform, admin, args.tasks).await?;
    served.executor.run_until_idle().await?;

    println!(
        "cost: the document limits' pass (median of {} runs per step) against a whole request \
         (median of {} sequential requests, SQLite, {} finished tasks)",
        args.iterations, args.requests, args.tasks
    );
    println!(
        "| document | bytes | tokens | cost | scan | parse | measure | scan + measure | request | (scan + measure) / request |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let large = large();
    let hostile = fan_out();
    let documents: [(&str, &str, bool); 4] = [
        ("dashboard page (50 tasks)", DASHBOARD, false),
        ("introspection", INTROSPECTION, false),
        ("eight dashboard pages", &large, false),
        ("fragment fan-out, refused", &hostile, true),
    ];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    for (name, query, refused) in documents {
        let pass = pass_times(query, args.iterations).await?;
        let request = request_latency(&http, url, admin, query, args.requests, refused).await?;
        // Parsing is not new work: async-graphql reuses the parse.
        let total = pass.scan + pass.measure;
        println!(
            "| {name} | {} | {} | {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.2} ms | {:.2} % |",
            query.len(),
            pass.tokens,
            pass.cost,
            micros(pass.scan),
            micros(pass.parse),
            micros(pass.measure),
            micros(total),
            ms(request),
            100.0 * total.as_secs_f64() / request.as_secs_f64(),
        );
    }
    served.stop().await
}
