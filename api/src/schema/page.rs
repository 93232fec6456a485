//! Relay pagination on the wire: `first`/`after` arguments into a domain
//! page request, and a domain page into a connection whose cursors are
//! opaque ids.

use async_graphql::connection::Connection;
use brainstem_domain::{
    Error,
    page::{Page, PageRequest},
};
use uuid::Uuid;

use super::ids;
use crate::error::ResultExt;

pub fn page_request(
    first: Option<i32>,
    after: Option<String>,
) -> async_graphql::Result<PageRequest> {
    let first = match first {
        Some(n) if n < 0 => {
            return Err(Error::validation("`first` must not be negative")).gql();
        }
        Some(n) => Some(n as u64),
        None => None,
    };
    let after = after.as_deref().map(ids::decode_cursor).transpose().gql()?;
    Ok(PageRequest { first, after })
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
