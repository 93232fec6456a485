//! Keyset pagination over UUID v7 ids, both ways and in either order.
//! Every list in the API is a page of at most [`MAX_PAGE_SIZE`] rows.
//!
//! **The key is the id.** Every listed row's id is a UUID v7 minted by the
//! process that inserts it, from the clock that also stamps its
//! `created_at`: id order is creation order (to the millisecond, and the
//! `uuid` crate's counter keeps one process's ids rising within one), and
//! ids are unique, so no second column is needed to break ties. Ordering
//! by `(created_at, id)` would give the same order with a wider key and a
//! wider cursor; ordering by id keeps one index column per order and lets
//! a cursor be the row's id alone. A cursor therefore names a position,
//! not a direction: the cursor of a newest-first page continues a
//! newest-first request, and means the same row in an oldest-first one.
//!
//! **Relay semantics** ([`PageRequest`]): `after` and `before` bound the
//! list (in its [`Order`]); `first: n` is the first n rows in bounds,
//! `last: n` the last n, returned in the list's order. `first` and `last`
//! together are refused. With neither, a page of [`DEFAULT_PAGE_SIZE`] is
//! read from the front, or from the back when only `before` is given (the
//! page before a cursor). `has_next_page` / `has_previous_page` are exact
//! on the side the page was read from (one row past the page is read);
//! on the other side they say whether a cursor bounds the list there.
//!
//! A read runs from the end the page is taken from ([`PageRequest::scan`]),
//! so `last: n` is an index scan of n + 1 rows too, and [`cut`] puts the
//! rows back in the list's order.

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

/// The type name and UUID of a global id ([`global_id`]), if it is one.
pub fn parse_global_id(id: &str) -> Option<(String, Uuid)> {
    use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
    let bytes = URL_SAFE_NO_PAD.decode(id.trim_end_matches('=')).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (type_name, uuid) = text.split_once(':')?;
    Some((type_name.to_owned(), Uuid::parse_str(uuid).ok()?))
}

/// The UUID of a global id of a `type_name` row; a malformed id, or one of
/// another type, is a validation error.
pub fn global_id_of(id: &str, type_name: &str) -> Result<Uuid> {
    match parse_global_id(id) {
        Some((ty, uuid)) if ty == type_name => Ok(uuid),
        Some(_) => Err(Error::validation(format!(
            "`{id}` is not an id of a {type_name}"
        ))),
        None => Err(Error::validation(format!("`{id}` is not a valid id"))),
    }
}

pub const DEFAULT_PAGE_SIZE: u64 = 20;
pub const MAX_PAGE_SIZE: u64 = 100;

/// The order of a list: by id, which is creation order (see the module
/// header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    #[default]
    OldestFirst,
    NewestFirst,
}

impl Order {
    fn reversed(self) -> Self {
        match self {
            Order::OldestFirst => Order::NewestFirst,
            Order::NewestFirst => Order::OldestFirst,
        }
    }
}

/// The client's request: of the rows after `after` and before `before` (in
/// `order`), the first `first` or the last `last`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageRequest {
    pub first: Option<u64>,
    pub after: Option<Uuid>,
    pub last: Option<u64>,
    pub before: Option<Uuid>,
    pub order: Order,
}

impl PageRequest {
    /// Up to `first` rows after `after`, oldest first.
    pub fn forward(first: u64, after: Option<Uuid>) -> Self {
        Self {
            first: Some(first),
            after,
            ..Self::default()
        }
    }

    /// This request in `order`.
    pub fn in_order(self, order: Order) -> Self {
        Self { order, ..self }
    }

    /// How many rows the page holds at most; refuses `first` with `last`
    /// and a size past [`MAX_PAGE_SIZE`].
    pub fn size(&self) -> Result<u64> {
        let (name, n) = match (self.first, self.last) {
            (Some(_), Some(_)) => {
                return Err(Error::validation(
                    "`first` and `last` cannot be used together: ask for the first rows after a \
                     cursor, or the last rows before one",
                ));
            }
            (Some(n), None) => ("first", n),
            (None, Some(n)) => ("last", n),
            (None, None) => return Ok(DEFAULT_PAGE_SIZE),
        };
        if n > MAX_PAGE_SIZE {
            return Err(Error::validation(format!(
                "`{name}` is {n}; at most {MAX_PAGE_SIZE} rows can be requested at once"
            )));
        }
        Ok(n)
    }

    /// Whether the page is taken from the back of the list: `last`, or
    /// `before` alone.
    pub fn from_back(&self) -> bool {
        self.last.is_some() || (self.first.is_none() && self.before.is_some())
    }

    /// The order rows are read in: the list's, or its reverse when the
    /// page is taken from the back.
    pub fn scan(&self) -> Order {
        if self.from_back() {
            self.order.reversed()
        } else {
            self.order
        }
    }

    /// Whether `id` lies within the cursors' bounds.
    fn in_bounds(&self, id: Uuid) -> bool {
        let (after, before) = match self.order {
            Order::OldestFirst => (
                self.after.is_none_or(|a| id > a),
                self.before.is_none_or(|b| id < b),
            ),
            Order::NewestFirst => (
                self.after.is_none_or(|a| id < a),
                self.before.is_none_or(|b| id > b),
            ),
        };
        after && before
    }
}

/// One page of rows, in the order asked for.
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

/// `select` within the cursors' bounds, ordered by id from the end the
/// page is taken from, one row past the page (which says whether there is
/// more on that side); and the page's size.
pub fn page_of<E: EntityTrait>(
    select: Select<E>,
    id_column: E::Column,
    request: PageRequest,
) -> Result<(Select<E>, u64)> {
    let size = request.size()?;
    let mut select = select;
    let newest_first = request.order == Order::NewestFirst;
    // After a cursor is later in an oldest-first list, earlier in a
    // newest-first one; before it, the opposite.
    let beyond = |id: Uuid, later: bool| {
        if later {
            id_column.gt(id)
        } else {
            id_column.lt(id)
        }
    };
    if let Some(after) = request.after {
        select = select.filter(beyond(after, !newest_first));
    }
    if let Some(before) = request.before {
        select = select.filter(beyond(before, newest_first));
    }
    let select = match request.scan() {
        Order::OldestFirst => select.order_by_asc(id_column),
        Order::NewestFirst => select.order_by_desc(id_column),
    };
    Ok((select.limit(size + 1), size))
}

/// The page of `items`, read in [`PageRequest::scan`] order by
/// [`page_of`]'s select (at most `size` + 1 of them), in the list's order.
pub fn cut<T>(mut items: Vec<T>, size: u64, request: PageRequest) -> Page<T> {
    let more = items.len() as u64 > size;
    items.truncate(size as usize);
    if request.from_back() {
        items.reverse();
        Page {
            items,
            has_next_page: request.before.is_some(),
            has_previous_page: more,
        }
    } else {
        Page {
            items,
            has_next_page: more,
            has_previous_page: request.after.is_some(),
        }
    }
}

/// The page `request` asks for of `items` held in memory (a list too
/// small, or too derived, to page in SQL): the same answer [`page_of`] and
/// [`cut`] give over a table.
pub fn slice<T>(
    items: Vec<T>,
    id_of: impl Fn(&T) -> Uuid,
    request: PageRequest,
) -> Result<Page<T>> {
    let size = request.size()?;
    let mut kept: Vec<(Uuid, T)> = items
        .into_iter()
        .map(|item| (id_of(&item), item))
        .filter(|(id, _)| request.in_bounds(*id))
        .collect();
    kept.sort_unstable_by_key(|(id, _)| *id);
    if request.scan() == Order::NewestFirst {
        kept.reverse();
    }
    kept.truncate(size as usize + 1);
    Ok(cut(
        kept.into_iter().map(|(_, item)| item).collect(),
        size,
        request,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = (0..n).map(|_| Uuid::now_v7()).collect();
        ids.sort_unstable();
        ids
    }

    fn page(ids: &[Uuid], request: PageRequest) -> (Vec<usize>, bool, bool) {
        let page = slice(ids.to_vec(), |id| *id, request).unwrap();
        let at = page
            .items
            .iter()
            .map(|id| ids.iter().position(|x| x == id).unwrap())
            .collect();
        (at, page.has_previous_page, page.has_next_page)
    }

    #[test]
    fn last_before_is_the_rows_just_before_the_cursor_in_list_order() {
        let ids = ids(7);
        let last = |n, before| PageRequest {
            last: Some(n),
            before,
            ..PageRequest::default()
        };
        assert_eq!(page(&ids, last(3, None)), (vec![4, 5, 6], true, false));
        assert_eq!(
            page(&ids, last(3, Some(ids[4]))),
            (vec![1, 2, 3], true, true)
        );
        assert_eq!(
            page(&ids, last(3, Some(ids[3]))),
            (vec![0, 1, 2], false, true)
        );
        assert_eq!(page(&ids, last(3, Some(ids[0]))), (vec![], false, true));
        let newest = |r: PageRequest| r.in_order(Order::NewestFirst);
        assert_eq!(page(&ids, newest(last(2, None))), (vec![1, 0], true, false));
        assert_eq!(
            page(&ids, newest(last(2, Some(ids[3])))),
            (vec![5, 4], true, true)
        );
        assert_eq!(
            page(&ids, newest(PageRequest::forward(2, Some(ids[5])))),
            (vec![4, 3], true, true)
        );
        assert_eq!(
            page(&ids, newest(PageRequest::default())).0,
            vec![6, 5, 4, 3, 2, 1, 0]
        );
    }

    #[test]
    fn first_with_last_and_oversized_pages_are_refused() {
        let both = PageRequest {
            first: Some(1),
            last: Some(1),
            ..PageRequest::default()
        };
        assert!(matches!(both.size(), Err(Error::Validation(_))));
        let big = PageRequest {
            last: Some(MAX_PAGE_SIZE + 1),
            ..PageRequest::default()
        };
        assert!(matches!(big.size(), Err(Error::Validation(m)) if m.contains("`last`")));
    }
}
