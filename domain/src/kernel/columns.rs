//! Reading a statement's columns by position.
//!
//! `QueryResult::try_get_by_index` reports a NULL column as an error that
//! carries a message formatted for it, which an optional field then drops:
//! for a page of rows with many NULL columns, formatting those messages
//! cost more than decoding the values. [`column`] reads PostgreSQL's rows
//! through the driver, where a NULL is `None` without a message; SQLite's
//! (the embedded default, whose reads are not the bottleneck) still go
//! through `QueryResult`.
//!
//! Invariant: a column reads as the same value on either path (the
//! one-statement test in `tests/e2e/dataloader.rs` compares a page read
//! this way with the same tasks read through the entities).

use sea_orm::{
    QueryResult, TryGetable,
    sqlx::{self, Decode, Postgres, Row, Type},
};

use crate::{Error, Result};

/// Column `index` of `row`, as `T` (`Option<_>` for a nullable column).
pub fn column<T>(row: &QueryResult, index: usize) -> Result<T>
where
    T: TryGetable + Type<Postgres> + for<'r> Decode<'r, Postgres>,
{
    match row.try_as_pg_row() {
        Some(row) => row
            .try_get(index)
            .map_err(|err: sqlx::Error| Error::Internal(format!("column {index}: {err}"))),
        None => Ok(row.try_get_by_index(index)?),
    }
}
