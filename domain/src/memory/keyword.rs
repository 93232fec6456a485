//! The keyword leg of memory search: PostgreSQL full-text search
//! (`search_tsv @@ to_tsquery('english', …)`, ranked by `ts_rank_cd`) or
//! SQLite FTS5 (matched by FTS5, ranked by [`bm25`] over the tenant's own
//! memories). Query words are OR-ed: fusion only needs a ranked candidate
//! list, and a fact rarely repeats every word of a question. Only ranks are
//! used downstream, so the two engines' different raw scores never meet.
//!
//! Invariant: a tenant's keyword ranking does not depend on another
//! tenant's memories (PostgreSQL's `ts_rank_cd` counts nothing across rows;
//! SQLite ranks here, since FTS5's own `bm25()` counts each word in every
//! tenant's memories). The one exception: a SQLite match set of over
//! [`RANKED_HERE`] memories is left to `bm25()`.
//!
//! English stop words ([`STOP_WORDS`], PostgreSQL's own `english` list) are
//! dropped from every query before either engine sees it: PostgreSQL would
//! drop them anyway, but FTS5 has no stop-word list, and "the", "is" or
//! "who" matched most of a tenant's memories and pushed the right one down.
//! How much of a query a keyword hit covers ([`coverages`]) is measured the
//! same way on both backends, so fusion can ignore hits below a floor.
//!
//! On PostgreSQL, `search_tsv` also holds the lexeme `~<tenant id>`, and
//! every query ANDs it in, so the GIN index looks only at the tenant's
//! memories.
//!
//! Query words whose lexeme is in more than [`COMMON_FREQUENCY`] of the
//! tenant's memories and in more than [`COMMON_ROWS`] of them (on
//! PostgreSQL counted by `ts_stat` over a sample of [`COMMON_SAMPLE`] of the
//! tenant's own memories, read in its scope, and kept per tenant for a
//! while; on SQLite counted per query word by FTS5 itself) are left
//! out of the keyword leg, like stop words: OR-ing them would match, fetch
//! and rank a large share of a tenant's memories while barely changing the
//! order. A query made only of such words looks for memories with all of
//! them.
//!
//! Under row-level security PostgreSQL uses an index for a condition only
//! if its operator is leakproof: the full-text index needs `ts_match_vq`
//! (`@@`) marked `LEAKPROOF` by a superuser, once per database (README,
//! PostgreSQL; the server warns at start-up when it is not).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use brainstem_entity::{MemoryId, TenantId, TenantScope};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use uuid::Uuid;

use super::{
    embedder::words,
    sql::{CandidateFilter, Sql, push_filter, tenant_condition},
};
use crate::Result;

/// At most this many distinct query words are searched for.
const MAX_TERMS: usize = 32;

#[rustfmt::skip]
/// PostgreSQL's `english` stop words (`english.stop`, from Snowball):
/// words that say nothing about which memory a query is after.
pub const STOP_WORDS: &[&str] = &[
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours",
    "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself",
    "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which",
    "who", "whom", "this", "that", "these", "those", "am", "is", "are", "was", "were", "be",
    "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "a", "an",
    "the", "and", "but", "if", "or", "because", "as", "until", "while", "of", "at", "by",
    "for", "with", "about", "against", "between", "into", "through", "during", "before",
    "after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off", "over",
    "under", "again", "further", "then", "once", "here", "there", "when", "where", "why",
    "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no",
    "nor", "not", "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will",
    "just", "don", "should", "now",
];

pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word)
}

/// Distinct words of a query that are not stop words, safe to put in either
/// engine's query syntax (letters and digits only).
pub fn terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words(query) {
        if !is_stop_word(&w) && !out.contains(&w) {
            out.push(w);
        }
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

/// A word reduced to a rough stem (a few English suffixes cut), so that
/// "requests" meets "request" and "approved" meets "approves" when
/// [`coverages`] compares a query with a memory. Cruder than either
/// engine's stemmer on purpose: it only has to be the same on both.
fn stem(word: &str) -> &str {
    for suffix in ["ing", "ies", "ied", "es", "ed", "ly", "s", "e", "y"] {
        if let Some(stem) = word.strip_suffix(suffix)
            && stem.chars().count() >= 3
        {
            return stem;
        }
    }
    word
}

/// How much of a query each candidate text covers, in [0, 1]: the query's
/// words (stop words left out) it has, by rough stem, each weighted by how
/// rare it is among the candidates (`ln(1 + n / df)`, n candidates, df of
/// them with the word), over the weight of every query word some candidate
/// has. So a name or code that one memory has counts for much, a word half
/// the candidates share for little, and a word none has for nothing.
/// Computed in Rust over the texts both legs returned, so it is the same on
/// both backends; fusion ignores keyword hits below a floor of it
/// ([`super::rank::KEYWORD_FLOOR`]).
pub fn coverages(query_terms: &[String], texts: &[&str]) -> Vec<f64> {
    let mut query: Vec<&str> = query_terms.iter().map(|t| stem(t)).collect();
    query.sort_unstable();
    query.dedup();
    let has: Vec<Vec<bool>> = texts
        .iter()
        .map(|text| {
            let stems: Vec<String> = words(text).map(|w| stem(&w).to_owned()).collect();
            query.iter().map(|q| stems.iter().any(|s| s == q)).collect()
        })
        .collect();
    let n = texts.len() as f64;
    let weights: Vec<f64> = (0..query.len())
        .map(|i| {
            let df = has.iter().filter(|h| h[i]).count();
            if df == 0 {
                0.0
            } else {
                (1.0 + n / df as f64).ln()
            }
        })
        .collect();
    let total: f64 = weights.iter().sum();
    has.iter()
        .map(|h| {
            if total <= 0.0 {
                return 0.0;
            }
            h.iter()
                .zip(&weights)
                .filter(|(has, _)| **has)
                .map(|(_, w)| w)
                .sum::<f64>()
                / total
        })
        .collect()
}

/// A lexeme in more than this share of all memories is left out of a query
/// that has rarer words.
pub const COMMON_FREQUENCY: f64 = 0.01;

/// ... and in more than this many memories: on a small table every word is
/// in more than 1 % of rows, and ranking all matches is cheap anyway.
pub const COMMON_ROWS: f64 = 1_000.0;

/// How many of a tenant's memories the word counts are taken from.
pub const COMMON_SAMPLE: i64 = 5_000;

/// How long a tenant's list of common lexemes is kept before it is read
/// again.
const COMMON_REFRESH: Duration = Duration::from_secs(300);

/// Tenants whose lists are kept at most (the map is cleared when full).
const COMMON_TENANTS: usize = 10_000;

/// Per tenant, the lexemes common enough to leave out of its keyword
/// queries, counted in its own memories and kept for [`COMMON_REFRESH`].
#[derive(Default)]
pub struct CommonLexemes {
    cached: Mutex<HashMap<TenantId, (Instant, Arc<String>)>>,
}

impl CommonLexemes {
    /// Space-separated lexemes (empty for a tenant with few memories, and
    /// on SQLite).
    async fn get(&self, db: &DatabaseConnection, scope: TenantScope) -> Arc<String> {
        let tenant = scope.tenant_id();
        if let Ok(cached) = self.cached.lock()
            && let Some((at, lexemes)) = cached.get(&tenant)
            && at.elapsed() < COMMON_REFRESH
        {
            return lexemes.clone();
        }
        let lexemes = Arc::new(read_common(db, scope).await.unwrap_or_else(|err| {
            tracing::warn!(%err, "cannot count search words; keyword search keeps every word");
            String::new()
        }));
        if let Ok(mut cached) = self.cached.lock() {
            if cached.len() >= COMMON_TENANTS {
                cached.clear();
            }
            cached.insert(tenant, (Instant::now(), lexemes.clone()));
        }
        lexemes
    }
}

async fn read_common(db: &DatabaseConnection, scope: TenantScope) -> Result<String> {
    let tenant = scope.tenant_id().uuid();
    let mut sql = Sql::new(DbBackend::Postgres);
    sql.push("SELECT count(*)::float8 AS rows FROM memories m WHERE ");
    tenant_condition(&mut sql, scope);
    let rows: f64 = db
        .query_one_raw(sql.statement())
        .await?
        .map(|row| row.try_get("", "rows"))
        .transpose()?
        .unwrap_or(0.0);
    if rows <= COMMON_ROWS {
        return Ok(String::new());
    }
    // The tenant id is a `Uuid`, formatted by us: nothing to escape.
    let counted = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT word, ndoc::float8 AS ndoc FROM ts_stat(\
                 'SELECT search_tsv FROM memories WHERE tenant_id = ''{tenant}'' LIMIT {COMMON_SAMPLE}') \
                 WHERE ndoc > 1"
            ),
        ))
        .await?;
    let sample = rows.min(COMMON_SAMPLE as f64);
    let mut common = Vec::new();
    for row in counted {
        let word: String = row.try_get("", "word")?;
        let docs: f64 = row.try_get("", "ndoc")?;
        if is_common(&word, docs / sample, rows) {
            common.push(word);
        }
    }
    common.sort();
    Ok(common.join(" "))
}

/// Whether a lexeme in `share` of a tenant's `rows` memories is left out of
/// its queries. The tenant's own lexeme (`~…`) and lexemes that would need
/// quoting never are.
fn is_common(lexeme: &str, share: f64, rows: f64) -> bool {
    share > COMMON_FREQUENCY
        && share * rows > COMMON_ROWS
        && !lexeme.is_empty()
        && lexeme.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Up to `k` memories matching any query word, best first.
pub async fn search(
    db: &DatabaseConnection,
    scope: TenantScope,
    query: &str,
    k: usize,
    filter: &CandidateFilter,
    common: &CommonLexemes,
) -> Result<Vec<MemoryId>> {
    let terms = terms(query);
    if terms.is_empty() || k == 0 {
        return Ok(Vec::new());
    }
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            let mut sql = Sql::new(backend);
            let common = common.get(db, scope).await;
            // The query's lexemes that are not common, OR-ed; when every
            // one is common, all of them AND-ed (few rows match them all).
            sql.push(
                "SELECT m.id AS id FROM memories m, (SELECT coalesce((SELECT \
                 to_tsquery('simple', string_agg(quote_literal(l), ' | ')) FROM \
                 unnest(tsvector_to_array(to_tsvector('english', ",
            )
            .bind(terms.join(" "))
            .push("))) AS l WHERE l <> ALL (string_to_array(")
            .bind(common.as_str().to_owned())
            .push(", ' '))), to_tsquery('english', ")
            .bind(terms.join(" & "))
            .push(")) AS q) AS qq WHERE ");
            tenant_condition(&mut sql, scope);
            // The tenant's own lexeme (see the migration that added it):
            // the GIN index then returns only this tenant's matches.
            // A query of stop words only is empty, and `empty && tenant`
            // would match every memory of the tenant.
            sql.push(" AND numnode(qq.q) > 0 AND m.search_tsv @@ (qq.q && ")
                .bind(format!("'~{}'", scope.tenant_id().uuid()))
                .push("::tsquery)");
            push_filter(&mut sql, scope, filter);
            sql.push(&format!(
                " ORDER BY ts_rank_cd(m.search_tsv, qq.q) DESC, m.id LIMIT {k}"
            ));
            sql
        }
        _ => {
            // As on PostgreSQL: common words are left out, and a query of
            // common words only looks for memories with all of them.
            let (rows, common) = sqlite_common(db, scope, &terms).await?;
            return sqlite_search(db, scope, &terms, &common, rows, k, filter).await;
        }
    };
    let rows = db.query_all_raw(sql.statement()).await?;
    rows.into_iter()
        .map(|row| Ok(MemoryId::from(row.try_get::<Uuid>("", "id")?)))
        .collect()
}

/// A SQLite match set of at most this many memories is ranked in Rust
/// ([`bm25`]); a larger one by FTS5's `bm25()`.
const RANKED_HERE: usize = 2_000;

/// SQLite's keyword search: the tenant's matches ranked by [`bm25`] over the
/// tenant's own memories. FTS5's `bm25()` counts each word's documents in
/// the whole table, every tenant's: each search then walked every tenant's
/// matches of its words (another tenant's 100,000 memories holding one of
/// them made a search of 1,000 memories a quarter slower), and one
/// tenant's words moved another's ranking. Only a match set over
/// [`RANKED_HERE`] memories is left to `bm25()`.
async fn sqlite_search(
    db: &DatabaseConnection,
    scope: TenantScope,
    terms: &[String],
    common: &[String],
    tenant_rows: f64,
    k: usize,
    filter: &CandidateFilter,
) -> Result<Vec<MemoryId>> {
    let (words, fts) = sqlite_words(terms, common);
    let statement = sqlite_statement(scope, &fts, filter, SqliteOrder::Unranked).statement();
    let rows = db.query_all_raw(statement).await?;
    if rows.len() > RANKED_HERE {
        let statement = sqlite_statement(scope, &fts, filter, SqliteOrder::Bm25(k)).statement();
        let rows = db.query_all_raw(statement).await?;
        return rows
            .into_iter()
            .map(|row| Ok(MemoryId::from(row.try_get::<Uuid>("", "id")?)))
            .collect();
    }
    let mut found = Vec::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.try_get("", "id")?;
        let content: String = row.try_get("", "content")?;
        found.push((MemoryId::from(id), content));
    }
    let texts: Vec<&str> = found.iter().map(|(_, text)| text.as_str()).collect();
    let scores = bm25(&words, &texts, tenant_rows);
    let mut ranked: Vec<(MemoryId, f64)> = found.iter().map(|(id, _)| *id).zip(scores).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(ranked.into_iter().take(k).map(|(id, _)| id).collect())
}

/// BM25 (k1 = 1.2, b = 0.75, as FTS5's `bm25()`) of each text for
/// `query_words`, higher is better: a word's frequency in a text by rough
/// stem, its document frequency among `texts` (every memory of the tenant
/// with any of the words, when `texts` is the whole match set), of
/// `documents` in all; the average length taken over `texts`.
fn bm25(query_words: &[String], texts: &[&str], documents: f64) -> Vec<f64> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let mut query: Vec<&str> = query_words.iter().map(|t| stem(t)).collect();
    query.sort_unstable();
    query.dedup();
    let counted: Vec<(Vec<f64>, f64)> = texts
        .iter()
        .map(|text| {
            let mut tf = vec![0.0; query.len()];
            let mut length = 0.0;
            for w in words(text) {
                length += 1.0;
                if let Ok(i) = query.binary_search(&stem(&w)) {
                    tf[i] += 1.0;
                }
            }
            (tf, length)
        })
        .collect();
    let n = documents.max(texts.len() as f64);
    let idf: Vec<f64> = (0..query.len())
        .map(|i| {
            let df = counted.iter().filter(|(tf, _)| tf[i] > 0.0).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let average =
        (counted.iter().map(|(_, l)| l).sum::<f64>() / texts.len().max(1) as f64).max(1.0);
    counted
        .iter()
        .map(|(tf, length)| {
            tf.iter()
                .zip(&idf)
                .map(|(f, idf)| idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * length / average)))
                .sum()
        })
        .collect()
}

/// The words a SQLite search ranks by and its FTS5 query: the `rare`
/// words OR-ed, or all of `terms` AND-ed when every one is `common`.
fn sqlite_words(terms: &[String], common: &[String]) -> (Vec<String>, String) {
    let rare: Vec<String> = terms
        .iter()
        .filter(|t| !common.contains(t))
        .cloned()
        .collect();
    let (words, joint) = if rare.is_empty() {
        (terms.to_vec(), " AND ")
    } else {
        (rare, " OR ")
    };
    let fts = words
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(joint);
    (words, fts)
}

/// How [`sqlite_statement`] orders its matches.
#[derive(Clone, Copy)]
enum SqliteOrder {
    /// Up to [`RANKED_HERE`] + 1 of them with their text, unordered.
    Unranked,
    /// The best `k` by FTS5's `bm25()`.
    Bm25(usize),
}

/// SQLite's keyword statement: the memories of the scope's tenant matching
/// `fts` (FTS5 query syntax).
fn sqlite_statement(
    scope: TenantScope,
    fts: &str,
    filter: &CandidateFilter,
    order: SqliteOrder,
) -> Sql {
    let mut sql = Sql::new(DbBackend::Sqlite);
    sql.push(match order {
        SqliteOrder::Unranked => "SELECT m.id AS id, m.content AS content",
        SqliteOrder::Bm25(_) => "SELECT m.id AS id",
    })
    .push(
        " FROM memories_fts JOIN memories m ON m.id = memories_fts.memory_id \
         WHERE memories_fts MATCH ",
    );
    sqlite_match(&mut sql, scope, fts);
    sql.push(" AND memories_fts.tenant_id = ")
        .bind(scope.tenant_id().uuid())
        // The unary `+` keeps SQLite from answering `m` through its
        // (tenant, status) index, which it otherwise picks and then
        // scans the tenant's memories once per full-text match (15 ms
        // a search at 1,000 memories, growing with the tenant); each
        // match is one primary-key lookup instead (0.6 ms).
        .push(" AND +");
    tenant_condition(&mut sql, scope);
    push_filter(&mut sql, scope, filter);
    sql.push(&match order {
        SqliteOrder::Unranked => format!(" LIMIT {}", RANKED_HERE + 1),
        SqliteOrder::Bm25(k) => format!(" ORDER BY bm25(memories_fts), m.id LIMIT {k}"),
    });
    sql
}

/// An FTS5 query: `words` (FTS5 syntax) in the text, of the scope's
/// tenant only. Each row holds its tenant as one indexed token (see the
/// migration `m20261129_120000_tenant_in_sqlite_fts`), computed from the
/// same bound id as it was stored, so FTS5 reads only this tenant's
/// matches instead of every tenant's.
fn sqlite_match(sql: &mut Sql, scope: TenantScope, words: &str) {
    sql.push("(")
        .bind(format!("content : ({words}) AND tenant : "))
        .push(" || 't' || lower(hex(")
        .bind(scope.tenant_id().uuid())
        .push(")))");
}

/// How many memories the tenant has, and the query words in more than
/// [`COMMON_FREQUENCY`] and [`COMMON_ROWS`] of them, counted by FTS5 (one
/// statement; none are counted for a tenant with too few memories for any
/// word to be common).
async fn sqlite_common(
    db: &DatabaseConnection,
    scope: TenantScope,
    terms: &[String],
) -> Result<(f64, Vec<String>)> {
    let mut sql = Sql::new(DbBackend::Sqlite);
    sql.push("SELECT CAST(count(*) AS REAL) AS rows FROM memories m WHERE ");
    tenant_condition(&mut sql, scope);
    let rows: f64 = db
        .query_one_raw(sql.statement())
        .await?
        .map(|row| row.try_get("", "rows"))
        .transpose()?
        .unwrap_or(0.0);
    if rows <= COMMON_ROWS {
        return Ok((rows, Vec::new()));
    }
    let mut sql = Sql::new(DbBackend::Sqlite);
    sql.push("SELECT ");
    for (i, term) in terms.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.push("(SELECT CAST(count(*) AS REAL) FROM memories_fts WHERE memories_fts MATCH ");
        sqlite_match(&mut sql, scope, &format!("\"{term}\""));
        sql.push(" AND memories_fts.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(&format!(") AS c{i}"));
    }
    let Some(row) = db.query_one_raw(sql.statement()).await? else {
        return Ok((rows, Vec::new()));
    };
    let mut common = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let docs: f64 = row.try_get("", &format!("c{i}"))?;
        if is_common(term, docs / rows, rows) {
            common.push(term.clone());
        }
    }
    Ok((rows, common))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite finds each full-text match's memory by the primary key of
    /// `memories`; through the (tenant, status) index, which it would
    /// otherwise pick, it scanned the tenant's memories once per match.
    #[tokio::test]
    async fn sqlite_reads_each_match_by_primary_key() {
        let (_dir, db) = crate::kernel::db::plans::migrated_sqlite().await;
        let scope = TenantScope::new(TenantId::from(Uuid::now_v7()));
        let filter = CandidateFilter {
            tiers: vec!["LONG_TERM".into()],
            now: Some(chrono::Utc::now()),
            ..CandidateFilter::default()
        };
        let words = terms("which dock do the pallets ship from");
        for (common, order) in [
            (Vec::new(), SqliteOrder::Unranked),
            (Vec::new(), SqliteOrder::Bm25(10)),
            (words.clone(), SqliteOrder::Bm25(10)),
        ] {
            let (_, fts) = sqlite_words(&words, &common);
            let statement = sqlite_statement(scope, &fts, &filter, order).statement();
            let plan = crate::kernel::db::plans::query_plan(&db, statement).await;
            let memories: Vec<&String> = plan.iter().filter(|step| step.contains(" m ")).collect();
            assert_eq!(memories.len(), 1, "{plan:?}");
            assert!(
                memories[0].starts_with("SEARCH m USING INDEX sqlite_autoindex_memories_1 (id=?)")
                    || memories[0].starts_with("SEARCH m USING PRIMARY KEY"),
                "{plan:?}"
            );
            assert!(
                plan.iter().any(|step| step.contains("VIRTUAL TABLE INDEX")),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn terms_are_distinct_lowercase_words_without_syntax() {
        assert_eq!(
            terms("VIN's & \"bad\" | VIN (OCR)*"),
            vec!["vin", "bad", "ocr"]
        );
        assert!(terms("  !!  ").is_empty());
        assert_eq!(terms("Who is the owner of it?"), vec!["owner"]);
    }

    #[test]
    fn coverage_weighs_query_words_by_rarity_among_the_candidates() {
        let q = terms("who approves large refund requests for Globex");
        assert_eq!(q, vec!["approves", "large", "refund", "requests", "globex"]);
        let texts = [
            "Refunds: Jo approved the request for Globex, a large one.",
            "A large truck for Globex.",
            "A large crane.",
            "Nothing in common.",
        ];
        let c = coverages(&q, &texts);
        assert!((c[0] - 1.0).abs() < 1e-12, "{c:?}");
        assert_eq!(c[3], 0.0);
        // "globex" (in two texts) weighs more than "large" (in three).
        assert!(c[1] > 2.0 * c[2], "{c:?}");
        assert!(c[2] > 0.0);
        assert_eq!(coverages(&[], &["anything"]), vec![0.0]);
    }

    #[test]
    fn bm25_weighs_rare_words_and_short_texts_higher() {
        let q = terms("pallet refunds");
        let texts = [
            "Refund for the pallet.",
            "A refund.",
            "A refund, issued late.",
            "A refund for a refund.",
            "Nothing here.",
        ];
        let s = bm25(&q, &texts, 10.0);
        // "pallet" is in one text, "refund" in four: the text with both
        // leads, and rarity counts for more than repetition.
        assert!(s.iter().skip(1).all(|x| *x < s[0]), "{s:?}");
        // The same one match in a shorter text scores higher.
        assert!(s[1] > s[2], "{s:?}");
        // Twice the word scores higher, though not twice as high.
        assert!(s[3] > s[2] && s[3] < 2.0 * s[2], "{s:?}");
        assert_eq!(s[4], 0.0);
        // The tenant's size counts: the same matches among more memories
        // make each word rarer.
        assert!(bm25(&q, &texts, 1_000.0)[0] > s[0]);
        assert!(bm25(&q, &[], 10.0).is_empty());
    }

    #[test]
    fn common_lexemes_are_frequent_many_and_plain() {
        assert!(is_common("ocr", 0.2, 1_000_000.0));
        assert!(is_common("carrier", 0.011, 1_000_000.0));
        assert!(!is_common("vin", 0.005, 1_000_000.0));
        // 1.1 % of 50,000 rows is too few to leave out.
        assert!(!is_common("carrier", 0.011, 50_000.0));
        // Among few memories nothing is common.
        assert!(!is_common("ocr", 0.9, 1_000.0));
        // The tenant's own lexeme, and lexemes that need quoting, never are.
        assert!(!is_common("~0192", 1.0, 1e6));
        assert!(!is_common("a b", 1.0, 1e6));
        assert!(!is_common("", 1.0, 1e6));
    }
}
