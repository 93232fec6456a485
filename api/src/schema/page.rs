//! Relay pagination on the wire: `first`/`after` and `last`/`before`
//! arguments (and a list's `orderBy`) into a domain page request, and a
//! domain page into a connection whose cursors are opaque ids.
//!
//! Every connection takes all four arguments; lists a dashboard shows
//! newest first also take `orderBy: ListOrder`. The semantics (bounds,
//! which end a page is read from, `pageInfo`) are the domain's
//! (`brainstem_domain::page`); this file only checks what the wire can get
//! wrong (negative sizes, malformed cursors).

use async_graphql::{Enum, connection::Connection};
use brainstem_domain::{
    Error,
    page::{Order, Page, PageRequest},
};
use uuid::Uuid;

use super::ids;
use crate::error::ResultExt;

/// The order of a list, by when its rows were created. A cursor names a
/// row, not a direction: it continues a request in the order its page
/// was read in.
#[derive(Enum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListOrder {
    /// Oldest first (the default).
    #[default]
    CreatedAtAsc,
    /// Newest first.
    CreatedAtDesc,
}

impl From<ListOrder> for Order {
    fn from(order: ListOrder) -> Self {
        match order {
            ListOrder::CreatedAtAsc => Order::OldestFirst,
            ListOrder::CreatedAtDesc => Order::NewestFirst,
        }
    }
}

/// The domain request for a connection's arguments, oldest first.
pub fn page_request(
    first: Option<i32>,
    after: Option<String>,
    last: Option<i32>,
    before: Option<String>,
) -> async_graphql::Result<PageRequest> {
    let request = PageRequest {
        first: size("first", first)?,
        after: cursor(after)?,
        last: size("last", last)?,
        before: cursor(before)?,
        order: Order::OldestFirst,
    };
    // Refuses `first` with `last` (and oversized pages) before any read.
    request.size().gql()?;
    Ok(request)
}

/// [`page_request`] in the list's `orderBy`.
pub fn ordered_page_request(
    first: Option<i32>,
    after: Option<String>,
    last: Option<i32>,
    before: Option<String>,
    order_by: Option<ListOrder>,
) -> async_graphql::Result<PageRequest> {
    Ok(page_request(first, after, last, before)?.in_order(order_by.unwrap_or_default().into()))
}

fn size(name: &str, n: Option<i32>) -> async_graphql::Result<Option<u64>> {
    match n {
        Some(n) => u64::try_from(n)
            .map(Some)
            .map_err(|_| Error::validation(format!("`{name}` must not be negative")))
            .gql(),
        None => Ok(None),
    }
}

fn cursor(cursor: Option<String>) -> async_graphql::Result<Option<Uuid>> {
    cursor.as_deref().map(ids::decode_cursor).transpose().gql()
}

/// Turn a domain page into a Relay connection.
pub fn connection<T, N>(
    page: Page<T>,
    id_of: impl Fn(&T) -> Uuid,
    node: impl Fn(T) -> N,
) -> Connection<String, N>
where
    N: async_graphql::OutputType,
{
    let mut conn = Connection::new(page.has_previous_page, page.has_next_page);
    conn.edges.extend(page.items.into_iter().map(|item| {
        let cursor = ids::encode_cursor(id_of(&item));
        async_graphql::connection::Edge::new(cursor, node(item))
    }));
    conn
}
