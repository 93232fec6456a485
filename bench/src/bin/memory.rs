//! Memory at scale on PostgreSQL + pgvector.
//!
//! Loads `--target` memories into one tenant and the rest of `--total` into
//! `--tenants - 1` others (bulk `COPY`, with the GIN index built after the
//! load and the per-tenant HNSW indexes built by the vector index's
//! maintenance, as for an import), then measures through the domain
//! service:
//!
//! - load rate (rows/s, memories + vectors) and index build times;
//! - online `remember` rate with every index in place;
//! - hybrid `search` latency p50/p95 (keyword + vector + fusion + boosts);
//! - recall@k of the vector leg (the tenant's HNSW index, or an exact scan
//!   for tenants below `--tenant-index-rows`) against an exact scan;
//! - whether every query returned `limit` rows, for the big tenant and for a
//!   small one.
//!
//! Texts are synthetic sentences over a Zipf-distributed vocabulary, about
//! one of 200 topics each (`--corpus topics`, the default) or with no
//! structure at all (`--corpus random`); the vectors come from the offline
//! hashing embedder (`--embedder hashing`, the default), so the run needs no
//! network, or from the local MiniLM (`--embedder local`, 384 dimensions,
//! from a directory `brainstem models fetch` filled), which the load then
//! includes: its rate is ingest with embedding. With `--measure-only`, give
//! the `--corpus`, `--seed` and `--embedder` of the load, so that queries
//! look like the data.
//!
//! ```text
//! cargo run --release -p brainstem-bench --bin memory -- \
//!     --database-url postgres://postgres@127.0.0.1:5599/bench \
//!     --tenants 100 --total 1000000 --target 100000
//! ```

// The allocator the server ships with (see the crate's header).
use brainstem_bench as _;
use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use brainstem_domain::{
    Domain, TenantId, TenantScope,
    db::{self, Backend},
    events::EventBus,
    memory::{
        CandidateFilter, Embedder, MemoryConfig, NewMemory, SearchQuery, Tier,
        embedder::{EmbedderConfig, HashingEmbedder},
        vector::pg_vector_literal,
    },
    models::local::{MiniLmEmbedder, ModelFiles},
    tools::{ToolRegistry, WithBuiltins},
};
use chrono::Utc;
use clap::Parser;
use rand::{Rng, SeedableRng, rngs::StdRng};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

#[derive(Parser, Debug)]
#[command(about = "Load memories into PostgreSQL and measure hybrid search")]
struct Args {
    /// An empty PostgreSQL database (with pgvector available).
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: String,
    /// Number of tenants.
    #[arg(long, default_value_t = 100)]
    tenants: usize,
    /// Memories in all tenants together.
    #[arg(long, default_value_t = 1_000_000)]
    total: usize,
    /// Memories in the measured tenant (part of --total).
    #[arg(long, default_value_t = 100_000)]
    target: usize,
    /// Vector dimension.
    #[arg(long, default_value_t = 256)]
    dimension: usize,
    /// Search queries to time.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Hits per search.
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Rows per COPY.
    #[arg(long, default_value_t = 20_000)]
    chunk: usize,
    /// Memories written one by one through `remember` after the load
    /// (default 500; with `--measure-only`, none unless given).
    #[arg(long)]
    online_inserts: Option<usize>,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// pgvector `hnsw.ef_search` (the service raises it to the candidate count).
    #[arg(long, default_value_t = 250)]
    ef_search: usize,
    /// How texts are generated (the queries too).
    #[arg(long, value_enum, default_value_t = Corpus::Topics)]
    corpus: Corpus,
    /// Tenants with at least this many vectors get their own HNSW index;
    /// smaller ones are searched exactly.
    #[arg(long, default_value_t = 10_000)]
    tenant_index_rows: usize,
    /// Measure searches on data an earlier run loaded (the biggest tenant is
    /// the measured one, the smallest the small one); no load, and no
    /// writes unless `--online-inserts` is given.
    #[arg(long)]
    measure_only: bool,
    /// Where the vectors come from (`local` ignores `--dimension`: 384).
    #[arg(long, value_enum, default_value_t = EmbedderChoice::Hashing)]
    embedder: EmbedderChoice,
    /// For `--embedder local`: a directory `brainstem models fetch` filled.
    #[arg(long, env = "BRAINSTEM_MODELS_DIR", default_value = "models")]
    models_dir: PathBuf,
}

/// The embedder of the load and of the queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EmbedderChoice {
    /// Feature hashing of words (offline, lexical).
    Hashing,
    /// all-MiniLM-L6-v2 run in-process (semantic, 384 dimensions).
    Local,
}

/// Texts per embedding call during the load: the local embedder's batch.
const EMBED_BATCH: usize = 32;

/// Synthetic words: consonant-vowel syllables, Zipf-sampled.
struct Vocabulary {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocabulary {
    fn new(size: usize, rng: &mut StdRng) -> Self {
        const C: &[u8] = b"bcdfghklmnprstvz";
        const V: &[u8] = b"aeiou";
        let mut words = Vec::with_capacity(size);
        while words.len() < size {
            let syllables = rng.random_range(2..=4);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push(C[rng.random_range(0..C.len())] as char);
                w.push(V[rng.random_range(0..V.len())] as char);
            }
            words.push(w);
        }
        let mut cumulative = Vec::with_capacity(size);
        let mut sum = 0.0;
        for rank in 1..=size {
            sum += 1.0 / rank as f64;
            cumulative.push(sum);
        }
        Self { words, cumulative }
    }

    fn word(&self, rng: &mut StdRng) -> &str {
        let total = self.cumulative[self.cumulative.len() - 1];
        let x = rng.random::<f64>() * total;
        let i = self.cumulative.partition_point(|c| *c < x);
        &self.words[i.min(self.words.len() - 1)]
    }

    fn sentence(&self, rng: &mut StdRng, min: usize, max: usize) -> String {
        let n = rng.random_range(min..=max);
        (0..n).map(|_| self.word(rng)).collect::<Vec<_>>().join(" ")
    }
}

/// What the memories talk about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Corpus {
    /// Each memory and each query is about one of 200 topics: most of its
    /// words come from that topic's 60 words, the rest from the whole
    /// vocabulary. Texts about one topic resemble each other, as facts
    /// about one customer or one procedure do.
    Topics,
    /// Every word drawn from the whole vocabulary: no two texts are more
    /// related than chance makes them. The hardest case for an approximate
    /// index.
    Random,
}

/// Topic words per topic, topics, and the share of a text's words that
/// come from its topic.
const TOPIC_WORDS: usize = 60;
const TOPICS: usize = 200;
const TOPIC_SHARE: f64 = 0.6;

struct Texts {
    vocabulary: Vocabulary,
    corpus: Corpus,
    topics: Vec<Vec<usize>>,
}

impl Texts {
    fn new(corpus: Corpus, rng: &mut StdRng) -> Self {
        let vocabulary = Vocabulary::new(20_000, rng);
        // Topic words come from below the 200 most frequent words.
        let topics = (0..TOPICS)
            .map(|_| {
                (0..TOPIC_WORDS)
                    .map(|_| rng.random_range(200..vocabulary.words.len()))
                    .collect()
            })
            .collect();
        Self {
            vocabulary,
            corpus,
            topics,
        }
    }

    fn text(&self, rng: &mut StdRng, min: usize, max: usize) -> String {
        match self.corpus {
            Corpus::Random => self.vocabulary.sentence(rng, min, max),
            Corpus::Topics => {
                let topic = &self.topics[rng.random_range(0..self.topics.len())];
                let n = rng.random_range(min..=max);
                (0..n)
                    .map(|_| {
                        if rng.random_bool(TOPIC_SHARE) {
                            self.vocabulary.words[topic[rng.random_range(0..topic.len())]].as_str()
                        } else {
                            self.vocabulary.word(rng)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

const TIERS: [Tier; 4] = [
    Tier::Patterns,
    Tier::History,
    Tier::MemoryBank,
    Tier::Documents,
];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if Backend::of_url(&args.database_url)? != Backend::Postgres {
        bail!("this benchmark needs PostgreSQL");
    }
    if args.tenants < 2 || args.target >= args.total {
        bail!("need at least 2 tenants and --target < --total");
    }
    let conn = db::connect(&args.database_url, 4).await?;
    db::migrate(&conn).await?;
    let existing = conn
        .query_one_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT count(*) AS n FROM memories",
        ))
        .await?
        .map(|r| r.try_get::<i64>("", "n"))
        .transpose()?
        .unwrap_or(0);
    if existing > 0 && !args.measure_only {
        bail!("the database already holds {existing} memories; give an empty one");
    }
    if existing == 0 && args.measure_only {
        bail!("--measure-only needs a database an earlier run loaded");
    }
    let (embedder, embedder_config): (Arc<dyn Embedder>, EmbedderConfig) = match args.embedder {
        EmbedderChoice::Hashing => (
            Arc::new(HashingEmbedder::new(args.dimension)),
            EmbedderConfig::Offline,
        ),
        EmbedderChoice::Local => {
            let files = ModelFiles::find(&args.models_dir).with_context(|| {
                format!(
                    "no local models in {} (brainstem models fetch)",
                    args.models_dir.display()
                )
            })?;
            let dir = files.dir.clone();
            let embedder =
                tokio::task::spawn_blocking(move || MiniLmEmbedder::load(&files)).await??;
            (Arc::new(embedder), EmbedderConfig::Local { dir })
        }
    };
    let dimension = embedder.dimension();
    let config = MemoryConfig {
        embedding_dimension: dimension,
        embedder: embedder_config,
        hnsw_ef_search: args.ef_search,
        tenant_index_rows: args.tenant_index_rows,
        ..MemoryConfig::default()
    };
    let domain = Domain::with_memory(
        conn.clone(),
        ToolRegistry::builder().with_builtins()?.build(),
        EventBus::new(),
        config,
    )?;
    domain.prepare().await?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let texts = Texts::new(args.corpus, &mut rng);

    let mut summary = String::new();
    let (target_id, small_id) = if args.measure_only {
        let rows = conn
            .query_all_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT tenant_id, count(*) AS n FROM memories GROUP BY tenant_id ORDER BY n DESC, tenant_id",
            ))
            .await?;
        let first = rows.first().context("no tenants")?;
        let last = rows.last().context("no tenants")?;
        let (big, big_n): (Uuid, i64) = (first.try_get("", "tenant_id")?, first.try_get("", "n")?);
        let (little, little_n): (Uuid, i64) =
            (last.try_get("", "tenant_id")?, last.try_get("", "n")?);
        writeln!(
            summary,
            "measured on existing data: {existing} memories in {} tenants; measured tenant {big_n}, small tenant {little_n}; corpus {:?}; ef_search {}; tenant_index_rows {}",
            rows.len(),
            args.corpus,
            args.ef_search,
            args.tenant_index_rows
        )?;
        let started = Instant::now();
        let built = domain.memory.index().maintain().await?;
        if built > 0 {
            writeln!(
                summary,
                "per-tenant HNSW indexes built: {built} in {:.1} s",
                started.elapsed().as_secs_f64()
            )?;
        }
        (big, little)
    } else {
        // Tenants: the first is the measured one.
        let tenants: Vec<Uuid> = (0..args.tenants).map(|_| Uuid::now_v7()).collect();
        for chunk in tenants.chunks(500) {
            let mut sql = String::from("INSERT INTO tenants (id, slug, name, created_at) VALUES ");
            for (i, t) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                write!(sql, "('{t}', 'bench-{}', 'Bench', now())", t.simple())?;
            }
            conn.execute_unprepared(&sql).await?;
        }
        let per_other = (args.total - args.target) / (args.tenants - 1);
        let mut plan: Vec<(Uuid, usize)> = vec![(tenants[0], args.target)];
        plan.extend(tenants[1..].iter().map(|t| (*t, per_other)));
        let loaded_total: usize = plan.iter().map(|(_, n)| n).sum();

        // Bulk load without the GIN index; rebuild it afterwards.
        conn.execute_unprepared("DROP INDEX IF EXISTS ix_memories_search_tsv")
            .await?;
        let pool = conn.get_postgres_connection_pool();
        let mut pg = pool.acquire().await?;
        println!(
            "loading {loaded_total} memories: {} in the measured tenant, {per_other} in each of {} others (dimension {})",
            args.target,
            args.tenants - 1,
            dimension
        );
        let load_started = Instant::now();
        let mut done = 0usize;
        // Interleave tenants the way real traffic would, a chunk at a time.
        let mut remaining: Vec<(Uuid, usize)> = plan.clone();
        let now = Utc::now().to_rfc3339();
        while remaining.iter().any(|(_, n)| *n > 0) {
            let mut memories = String::new();
            let mut contents = Vec::new();
            let mut rows = 0;
            for (tenant, left) in remaining.iter_mut() {
                let take = (args.chunk / args.tenants).max(1).min(*left);
                for _ in 0..take {
                    let id = Uuid::now_v7();
                    let content = texts.text(&mut rng, 8, 24);
                    let tier = TIERS[rng.random_range(0..TIERS.len())];
                    let score: f64 = rng.random_range(0.3..1.0);
                    writeln!(
                        memories,
                        "{id}\t{tenant}\t\\N\t{}\tinsight\t{content}\t{score:.3}\t{}\t0.5\t1\t\\N\t{now}\t\\N\t\\N\tACTIVE\t\\N\t1\thashing\t\\N\t{now}\t{now}",
                        tier.as_str(),
                        rng.random_range(0..5),
                    )?;
                    contents.push((id, *tenant, content));
                }
                *left -= take;
                rows += take;
                if rows >= args.chunk {
                    break;
                }
            }
            let mut vectors = String::new();
            for batch in contents.chunks(EMBED_BATCH) {
                let batch_texts: Vec<String> = batch.iter().map(|(_, _, c)| c.clone()).collect();
                let embedded = embedder.embed(&batch_texts).await?;
                for ((id, tenant, _), v) in batch.iter().zip(embedded) {
                    writeln!(
                        vectors,
                        "{id}\t{tenant}\thashing\t{}",
                        pg_vector_literal(&v)
                    )?;
                }
            }
            let mut copy = pg
            .copy_in_raw(
                "COPY memories (id, tenant_id, subject_id, tier, category, content, score, uses, \
                 importance, confidence, source_task_id, valid_from, valid_to, superseded_by, status, \
                 expires_at, version, embedding_model, last_used_at, created_at, updated_at) FROM STDIN",
            )
            .await?;
            copy.send(memories.as_bytes()).await?;
            copy.finish().await?;
            let mut copy = pg
                .copy_in_raw(
                    "COPY memory_embeddings (memory_id, tenant_id, model, embedding) FROM STDIN",
                )
                .await?;
            copy.send(vectors.as_bytes()).await?;
            copy.finish().await?;
            done += rows;
            if done % 100_000 < rows {
                println!(
                    "  {done} rows, {:.0} rows/s",
                    done as f64 / load_started.elapsed().as_secs_f64()
                );
            }
        }
        drop(pg);
        let load = load_started.elapsed();
        // The model name written above must match the embedder's for reindex
        // bookkeeping; fix it in one statement rather than per row.
        conn.execute_unprepared(&format!(
            "UPDATE memories SET embedding_model = '{m}'; UPDATE memory_embeddings SET model = '{m}'",
            m = embedder.model()
        ))
        .await?;

        let started = Instant::now();
        conn.execute_unprepared(
            "CREATE INDEX ix_memories_search_tsv ON memories USING gin (search_tsv)",
        )
        .await?;
        let gin = started.elapsed();
        conn.execute_unprepared("VACUUM ANALYZE memory_embeddings")
            .await?;
        // What the maintenance job does after an import: an HNSW index for
        // each tenant with `tenant_index_rows` vectors or more.
        let started = Instant::now();
        let built = domain.memory.index().maintain().await?;
        let hnsw = started.elapsed();
        conn.execute_unprepared("VACUUM ANALYZE memories").await?;
        writeln!(
            summary,
            "scale: {loaded_total} memories in {} tenants; measured tenant {}, small tenant {per_other}; corpus {:?}; embedder {} ({dimension} dimensions); ef_search {}; tenant_index_rows {}",
            args.tenants,
            args.target,
            args.corpus,
            embedder.model(),
            args.ef_search,
            args.tenant_index_rows
        )?;
        writeln!(
            summary,
            "bulk load (embedding, then COPY of memories + vectors, btree indexes only): {:.1} s, {:.0} rows/s",
            load.as_secs_f64(),
            loaded_total as f64 / load.as_secs_f64()
        )?;
        writeln!(
            summary,
            "GIN (tsvector) build: {:.1} s; per-tenant HNSW (m=16, ef_construction=64): {built} built in {:.1} s",
            gin.as_secs_f64(),
            hnsw.as_secs_f64()
        )?;

        (tenants[0], tenants[1])
    };
    let target = TenantScope::new(TenantId::from(target_id));
    let small = TenantScope::new(TenantId::from(small_id));

    // Online writes through the service, every index in place.
    let started = Instant::now();
    let online_inserts = args
        .online_inserts
        .unwrap_or(if args.measure_only { 0 } else { 500 });
    for _ in 0..online_inserts {
        domain
            .memory
            .remember(
                target,
                NewMemory {
                    content: texts.text(&mut rng, 8, 24),
                    tier: Some(Tier::Patterns),
                    ..NewMemory::default()
                },
            )
            .await?;
    }
    let online = started.elapsed();
    if online_inserts > 0 {
        writeln!(
            summary,
            "online remember (embed + dedup lookup + insert, all indexes): {} writes in {:.1} s, {:.0} writes/s",
            online_inserts,
            online.as_secs_f64(),
            online_inserts as f64 / online.as_secs_f64()
        )?;
    }

    let queries: Vec<String> = (0..args.queries)
        .map(|_| texts.text(&mut rng, 3, 6))
        .collect();
    let mut report = Vec::new();
    for (name, scope) in [("measured tenant", target), ("small tenant", small)] {
        let mut latencies = Vec::with_capacity(queries.len());
        let mut full = 0usize;
        let mut vector_full = 0usize;
        let mut recall_sum = 0.0;
        let mut ann = Vec::with_capacity(queries.len());
        let mut exact_times = Vec::with_capacity(queries.len());
        for q in &queries {
            let started = Instant::now();
            let result = domain
                .memory
                .search(
                    scope,
                    SearchQuery {
                        text: q.clone(),
                        limit: Some(args.limit),
                        ..SearchQuery::default()
                    },
                )
                .await?;
            latencies.push(started.elapsed());
            if result.hits.len() == args.limit {
                full += 1;
            }
            let v = embedder
                .embed(std::slice::from_ref(q))
                .await?
                .pop()
                .context("the embedder returned no vector")?;
            let filter = CandidateFilter {
                now: Some(Utc::now()),
                ..CandidateFilter::default()
            };
            let index = domain.memory.index();
            let started = Instant::now();
            let approx = index.nearest(scope, &v, args.limit, &filter, false).await?;
            ann.push(started.elapsed());
            let started = Instant::now();
            let exact = index.nearest(scope, &v, args.limit, &filter, true).await?;
            exact_times.push(started.elapsed());
            if approx.len() == args.limit {
                vector_full += 1;
            }
            let hits = approx
                .iter()
                .filter(|(id, _)| exact.iter().any(|(e, _)| e == id))
                .count();
            recall_sum += hits as f64 / exact.len().max(1) as f64;
        }
        latencies.sort();
        ann.sort();
        exact_times.sort();
        report.push(format!(
            "| {name} | {} | {} | {} | {} | {} | {:.3} | {full}/{n} | {vector_full}/{n} |",
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.95)),
            ms(percentile(&ann, 0.5)),
            ms(percentile(&ann, 0.95)),
            ms(percentile(&exact_times, 0.5)),
            recall_sum / queries.len() as f64,
            n = queries.len(),
        ));
    }
    println!();
    print!("{summary}");
    println!();
    println!(
        "| tenant | hybrid search p50 | p95 | vector leg p50 | p95 | exact scan p50 | recall@{} vs exact | searches with {} hits | vector legs with {} rows |",
        args.limit, args.limit, args.limit
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for line in report {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 0.5), Duration::from_millis(51));
        assert_eq!(percentile(&d, 0.95), Duration::from_millis(95));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
