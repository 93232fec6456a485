//! A case-insensitive substring match on a text column, the one place its
//! SQL differs by backend: `ILIKE` on PostgreSQL, `LIKE` on SQLite (whose
//! `LIKE` ignores case). No index serves it: it filters the rows a scoped
//! read walks.
//!
//! The text is matched literally: `%`, `_` and `\` in it are escaped, never
//! wildcards. Case folding is PostgreSQL's on PostgreSQL and ASCII-only on
//! SQLite (SQLite's `LIKE` folds only ASCII letters), so the two agree on
//! ASCII text.

use sea_orm::{
    DbBackend,
    sea_query::{Expr, ExprTrait, IntoColumnRef, LikeExpr, extension::postgres::PgExpr},
};

/// At most this many characters are matched; a longer text is refused.
pub const MAX_MATCH_CHARS: usize = 200;

/// `column` contains `text`, ignoring case.
pub fn contains(backend: DbBackend, column: impl IntoColumnRef, text: &str) -> Expr {
    let escaped = text
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    let pattern = format!("%{escaped}%");
    match backend {
        // `\` is PostgreSQL's default escape character (and sea-query
        // would wrap an explicit `ESCAPE` after `ILIKE` in parentheses).
        DbBackend::Postgres => Expr::col(column).ilike(pattern),
        _ => Expr::col(column).like(LikeExpr::new(pattern).escape('\\')),
    }
}
