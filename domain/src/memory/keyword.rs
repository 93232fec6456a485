//! The keyword leg of memory search: PostgreSQL full-text search
//! (`search_tsv @@ to_tsquery('english', …)`, ranked by `ts_rank_cd`) or
//! SQLite FTS5 (ranked by `bm25`). Query words are OR-ed: fusion only needs a
//! ranked candidate list, and a fact rarely repeats every word of a question.
//! Only ranks are used downstream, so the two engines' different raw scores
//! never meet.
//!
//! On PostgreSQL, `search_tsv` also holds the lexeme `~<tenant id>`, and
//! every query ANDs it in, so the GIN index looks only at the tenant's
//! memories.
//!
//! Query words whose lexeme is in more than
//! [`COMMON_FREQUENCY`] of all memories and in more than [`COMMON_ROWS`]
//! of them (read from the planner's own statistics of `search_tsv`,
//! `pg_stats.most_common_elems`, and the table's row estimate) are left out
//! of the keyword leg, like stop words: OR-ing them would match, fetch and
//! rank a large share of a tenant's memories while barely changing the
//! order. A query made only of such words looks for memories with all of
//! them.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use brainstem_entity::{MemoryId, TenantScope};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use uuid::Uuid;

use super::{
    embedder::words,
    sql::{CandidateFilter, Sql, push_filter, tenant_condition},
};
use crate::Result;

/// At most this many distinct query words are searched for.
const MAX_TERMS: usize = 32;

/// Distinct words of a query, safe to put in either engine's query syntax
/// (letters and digits only).
pub fn terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words(query) {
        if !out.contains(&w) {
            out.push(w);
        }
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

/// A lexeme in more than this share of all memories is left out of a query
/// that has rarer words.
pub const COMMON_FREQUENCY: f64 = 0.01;

/// ... and in more than this many memories: on a small table every word is
/// in more than 1 % of rows, and ranking all matches is cheap anyway.
pub const COMMON_ROWS: f64 = 1_000.0;

/// How long the list of common lexemes is kept before it is read again.
const COMMON_REFRESH: Duration = Duration::from_secs(300);

/// The lexemes common enough to leave out of keyword queries, read from
/// PostgreSQL's statistics and kept for [`COMMON_REFRESH`].
#[derive(Default)]
pub struct CommonLexemes {
    cached: Mutex<Option<(Instant, Arc<String>)>>,
}

impl CommonLexemes {
    /// Space-separated lexemes (empty without statistics, as on a small or
    /// never-analyzed table, and on SQLite).
    async fn get(&self, db: &DatabaseConnection) -> Arc<String> {
        if let Ok(cached) = self.cached.lock()
            && let Some((at, lexemes)) = cached.as_ref()
            && at.elapsed() < COMMON_REFRESH
        {
            return lexemes.clone();
        }
        let lexemes = Arc::new(read_common(db).await.unwrap_or_else(|err| {
            tracing::warn!(%err, "cannot read search statistics; keyword search keeps every word");
            String::new()
        }));
        if let Ok(mut cached) = self.cached.lock() {
            *cached = Some((Instant::now(), lexemes.clone()));
        }
        lexemes
    }
}

async fn read_common(db: &DatabaseConnection) -> Result<String> {
    let row = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT s.most_common_elems::text AS elems, \
             s.most_common_elem_freqs::text AS freqs, c.reltuples::float8 AS rows \
             FROM pg_stats s JOIN pg_class c ON c.oid = 'memories'::regclass \
             WHERE s.schemaname = current_schema() AND s.tablename = 'memories' \
             AND s.attname = 'search_tsv'",
        ))
        .await?;
    let Some(row) = row else {
        return Ok(String::new());
    };
    let elems: Option<String> = row.try_get("", "elems")?;
    let freqs: Option<String> = row.try_get("", "freqs")?;
    let rows: Option<f64> = row.try_get("", "rows")?;
    Ok(common_from_stats(
        elems.as_deref().unwrap_or_default(),
        freqs.as_deref().unwrap_or_default(),
        rows.unwrap_or(0.0),
    ))
}

/// The lexemes of `pg_stats.most_common_elems` (array text) whose
/// frequency in `most_common_elem_freqs` is above [`COMMON_FREQUENCY`] and
/// whose estimated count among `rows` is above [`COMMON_ROWS`],
/// space-separated. Lexemes that need quoting in array text are skipped.
fn common_from_stats(elems: &str, freqs: &str, rows: f64) -> String {
    let list = |s: &str| -> Vec<String> {
        s.trim_matches(|c| c == '{' || c == '}')
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let freqs: Vec<f64> = list(freqs).iter().filter_map(|f| f.parse().ok()).collect();
    list(elems)
        .into_iter()
        .zip(freqs)
        .filter(|(e, f)| {
            *f > COMMON_FREQUENCY
                && f * rows > COMMON_ROWS
                && !e.is_empty()
                && e.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(e, _)| e)
        .collect::<Vec<_>>()
        .join(" ")
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
    let mut sql = Sql::new(backend);
    match backend {
        DbBackend::Postgres => {
            let common = common.get(db).await;
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
        }
        _ => {
            let fts = terms
                .iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            sql.push(
                "SELECT m.id AS id FROM memories_fts JOIN memories m ON m.id = memories_fts.memory_id \
                 WHERE memories_fts MATCH ",
            )
            .bind(fts)
            .push(" AND memories_fts.tenant_id = ")
            .bind(scope.tenant_id().uuid())
            .push(" AND ");
            tenant_condition(&mut sql, scope);
            push_filter(&mut sql, scope, filter);
            sql.push(&format!(" ORDER BY bm25(memories_fts), m.id LIMIT {k}"));
        }
    }
    let rows = db.query_all_raw(sql.statement()).await?;
    rows.into_iter()
        .map(|row| Ok(MemoryId::from(row.try_get::<Uuid>("", "id")?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_distinct_lowercase_words_without_syntax() {
        assert_eq!(
            terms("VIN's & \"bad\" | VIN (OCR)*"),
            vec!["vin", "s", "bad", "ocr"]
        );
        assert!(terms("  !!  ").is_empty());
    }

    #[test]
    fn common_lexemes_are_those_above_the_frequency_with_plain_text() {
        let elems = r#"{ocr,vin,"a b",carrier,x}"#;
        let freqs = "{0.2,0.005,0.3,0.011,0.5,0.005,0.5,0}";
        assert_eq!(
            common_from_stats(elems, freqs, 1_000_000.0),
            "ocr carrier x"
        );
        // 1.1 % of 50,000 rows is too few to leave out.
        assert_eq!(common_from_stats(elems, freqs, 50_000.0), "ocr x");
        // On a small table nothing is common.
        assert_eq!(common_from_stats(elems, freqs, 1_500.0), "");
        assert_eq!(common_from_stats("", "", 1e6), "");
    }
}
