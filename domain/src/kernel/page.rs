//! Keyset pagination over UUID v7 ids, which sort by creation time. Every
//! list in the API is a page of at most [`MAX_PAGE_SIZE`] rows.

use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
};
use uuid::Uuid;

use crate::{Error, Result};

/// The GraphQL global id of a `type_name` row: base64url (no padding) of
/// `"{type_name}:{uuid}"`. Clients treat it as opaque; the domain needs it
/// only where it speaks to clients outside GraphQL (webhook bodies).
pub fn global_id(type_name: &str, id: Uuid) -> String {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    URL_SAFE_NO_PAD.encode(format!("{type_name}:{id}"))
}

pub const DEFAULT_PAGE_SIZE: u64 = 20;
pub const MAX_PAGE_SIZE: u64 = 100;

/// The client's request: up to `first` rows after the row with id `after`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageRequest {
    pub first: Option<u64>,
    pub after: Option<Uuid>,
}

impl PageRequest {
    pub fn size(&self) -> Result<u64> {
        match self.first {
            None => Ok(DEFAULT_PAGE_SIZE),
            Some(n) if n <= MAX_PAGE_SIZE => Ok(n),
            Some(n) => Err(Error::validation(format!(
                "`first` is {n}; at most {MAX_PAGE_SIZE} rows can be requested at once"
            ))),
        }
    }
}

/// One page of rows, oldest first.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_next_page: bool,
    pub has_previous_page: bool,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            has_next_page: self.has_next_page,
            has_previous_page: self.has_previous_page,
        }
    }

    /// [`Page::map`] with a conversion that may fail.
    pub fn try_map<U>(self, f: impl FnMut(T) -> Result<U>) -> Result<Page<U>> {
        Ok(Page {
            items: self.items.into_iter().map(f).collect::<Result<_>>()?,
            has_next_page: self.has_next_page,
            has_previous_page: self.has_previous_page,
        })
    }
}

/// Fetch one page of `select`, ordered by `id_column`.
pub async fn fetch<E, C>(
    db: &C,
    select: Select<E>,
    id_column: E::Column,
    request: PageRequest,
) -> Result<Page<E::Model>>
where
    E: EntityTrait,
    C: ConnectionTrait,
{
    let (select, size) = page_of(select, id_column, request)?;
    let items = select.all(db).await?;
    Ok(cut(items, size, request))
}

/// [`fetch`] of a `select` narrowed to some columns (`select_only`), read
/// as `M`.
pub async fn fetch_as<E, C, M>(
    db: &C,
    select: Select<E>,
    id_column: E::Column,
    request: PageRequest,
) -> Result<Page<M>>
where
    E: EntityTrait,
    C: ConnectionTrait,
    M: sea_orm::FromQueryResult,
{
    let (select, size) = page_of(select, id_column, request)?;
    let items = select.into_model::<M>().all(db).await?;
    Ok(cut(items, size, request))
}

/// `select` ordered by id, after the cursor, one row past the page (which
/// says whether there is a next one); and the page's size.
pub fn page_of<E: EntityTrait>(
    select: Select<E>,
    id_column: E::Column,
    request: PageRequest,
) -> Result<(Select<E>, u64)> {
    let size = request.size()?;
    let mut select = select.order_by_asc(id_column);
    if let Some(after) = request.after {
        select = select.filter(id_column.gt(after));
    }
    Ok((select.limit(size + 1), size))
}

/// The page of `items` read by [`page_of`]'s select.
pub fn cut<T>(mut items: Vec<T>, size: u64, request: PageRequest) -> Page<T> {
    let has_next_page = items.len() as u64 > size;
    items.truncate(size as usize);
    Page {
        items,
        has_next_page,
        has_previous_page: request.after.is_some(),
    }
}
