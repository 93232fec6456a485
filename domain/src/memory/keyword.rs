//! The keyword leg of memory search: PostgreSQL full-text search
//! (`search_tsv @@ to_tsquery('english', …)`, ranked by `ts_rank_cd`) or
//! SQLite FTS5 (ranked by `bm25`). Query words are OR-ed: fusion only needs a
//! ranked candidate list, and a fact rarely repeats every word of a question.
//! Only ranks are used downstream, so the two engines' different raw scores
//! never meet.

use brainstem_entity::{MemoryId, TenantScope};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend};
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

/// Up to `k` memories matching any query word, best first.
pub async fn search(
    db: &DatabaseConnection,
    scope: TenantScope,
    query: &str,
    k: usize,
    filter: &CandidateFilter,
) -> Result<Vec<MemoryId>> {
    let terms = terms(query);
    if terms.is_empty() || k == 0 {
        return Ok(Vec::new());
    }
    let backend = db.get_database_backend();
    let mut sql = Sql::new(backend);
    match backend {
        DbBackend::Postgres => {
            sql.push("SELECT m.id AS id FROM memories m, to_tsquery('english', ")
                .bind(terms.join(" | "))
                .push(") q WHERE ");
            tenant_condition(&mut sql, scope);
            sql.push(" AND m.search_tsv @@ q");
            push_filter(&mut sql, scope, filter);
            sql.push(&format!(
                " ORDER BY ts_rank_cd(m.search_tsv, q) DESC, m.id LIMIT {k}"
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
}
