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
//!
//! **Nested lists** (the turns of each conversation of a page, the
//! children of each task) are one statement for all their parents
//! ([`fetch_groups_as`]), so listing N parents with their lists costs
//! what listing one does.

use std::collections::HashMap;

use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, FromQueryResult, IdenStatic,
    JoinType, QueryFilter, QueryOrder, QueryResult, QuerySelect, QueryTrait, Select,
    sea_query::{Alias, Asterisk, Expr, ExprTrait, Query, SelectStatement},
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

/// One page of each group's rows: of `select`'s rows whose `group_column`
/// is one of `groups`, each group paged by `request` on its own, read as
/// `M`, in one statement. Every page is exact as [`fetch`]'s is (one row
/// past it is read); every group gets a page, empty when it has no rows.
///
/// On PostgreSQL each group is a `LATERAL` read of its own page (the
/// groups a `VALUES` list), so an index on the group's column and the id
/// reads `size` + 1 rows per group however long its list. SQLite has no
/// `LATERAL`: each group's rows within the cursors' bounds are ranked by
/// id from the end the page is taken from (`ROW_NUMBER() OVER (PARTITION
/// BY …)`) and the first `size` + 1 of each kept.
pub async fn fetch_groups_as<E, C, M>(
    db: &C,
    select: Select<E>,
    id_column: E::Column,
    group_column: E::Column,
    groups: &[Uuid],
    request: PageRequest,
) -> Result<HashMap<Uuid, Page<M>>>
where
    E: EntityTrait,
    C: ConnectionTrait,
    M: FromQueryResult,
{
    let size = request.size()?;
    let mut pages: HashMap<Uuid, Vec<M>> = groups.iter().map(|g| (*g, Vec::new())).collect();
    if !groups.is_empty() {
        let backend = db.get_database_backend();
        let statement = match backend {
            DbBackend::Postgres => lateral_pages(select, id_column, group_column, groups, request),
            _ => ranked_pages(select, id_column, group_column, groups, request),
        };
        let rows = Grouped::<M>::find_by_statement(backend.build(&statement?))
            .all(db)
            .await?;
        for row in rows {
            pages.entry(row.group).or_default().push(row.row);
        }
    }
    Ok(pages
        .into_iter()
        .map(|(group, items)| (group, cut(items, size, request)))
        .collect())
}

/// PostgreSQL's [`fetch_groups_as`]: `(VALUES (g1), …) AS groups INNER
/// JOIN LATERAL (<one group's page, as [`page_of`] reads it>) ON true`.
fn lateral_pages<E: EntityTrait>(
    select: Select<E>,
    id_column: E::Column,
    group_column: E::Column,
    groups: &[Uuid],
    request: PageRequest,
) -> Result<SelectStatement> {
    // A `VALUES` list's column is `column1`.
    let parent = (Alias::new("groups"), Alias::new("column1"));
    let (page, _) = page_of(
        select.filter(Expr::col(group_column).equals(parent)),
        id_column,
        request,
    )?;
    let page = page.column_as(group_column, GROUP).into_query();
    let rows = Alias::new("page");
    Ok(Query::select()
        .column((rows.clone(), Asterisk))
        .from_values(groups.iter().copied(), Alias::new("groups"))
        .join_lateral(JoinType::InnerJoin, page, rows.clone(), Expr::cust("true"))
        .order_by((rows.clone(), Alias::new(GROUP)), sea_orm::Order::Asc)
        .order_by((rows, Alias::new(id_column.as_str())), scan_order(request))
        .to_owned())
}

/// SQLite's [`fetch_groups_as`]: every group's rows in bounds, ranked.
fn ranked_pages<E: EntityTrait>(
    select: Select<E>,
    id_column: E::Column,
    group_column: E::Column,
    groups: &[Uuid],
    request: PageRequest,
) -> Result<SelectStatement> {
    let size = request.size()?;
    let direction = match scan_order(request) {
        sea_orm::Order::Desc => "DESC",
        _ => "ASC",
    };
    let rank = Expr::cust(format!(
        "ROW_NUMBER() OVER (PARTITION BY \"{}\" ORDER BY \"{}\" {direction})",
        group_column.as_str(),
        id_column.as_str()
    ));
    let ranked = within_bounds(select, id_column, request)
        .filter(group_column.is_in(groups.iter().copied()))
        .column_as(group_column, GROUP)
        .column_as(rank, RANK)
        .into_query();
    Ok(Query::select()
        .column(Asterisk)
        .from_subquery(ranked, Alias::new("ranked"))
        .and_where(Expr::col(Alias::new(RANK)).lte(size as i64 + 1))
        .order_by(Alias::new(GROUP), sea_orm::Order::Asc)
        .order_by(Alias::new(RANK), sea_orm::Order::Asc)
        .to_owned())
}

/// The order rows are read in for `request` ([`PageRequest::scan`]).
fn scan_order(request: PageRequest) -> sea_orm::Order {
    match request.scan() {
        Order::OldestFirst => sea_orm::Order::Asc,
        Order::NewestFirst => sea_orm::Order::Desc,
    }
}

/// The aliases [`fetch_groups_as`] adds: a row's group and (on SQLite) its
/// rank in it.
const GROUP: &str = "page_group";
const RANK: &str = "page_rank";

/// A row of [`fetch_groups_as`] with the group it belongs to.
struct Grouped<M> {
    group: Uuid,
    row: M,
}

impl<M: FromQueryResult> FromQueryResult for Grouped<M> {
    fn from_query_result(result: &QueryResult, prefix: &str) -> std::result::Result<Self, DbErr> {
        Ok(Self {
            group: result.try_get(prefix, GROUP)?,
            row: M::from_query_result(result, prefix)?,
        })
    }
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
    let select = within_bounds(select, id_column, request).order_by(id_column, scan_order(request));
    Ok((select.limit(size + 1), size))
}

/// `select`'s rows within the cursors' bounds.
fn within_bounds<E: EntityTrait>(
    select: Select<E>,
    id_column: E::Column,
    request: PageRequest,
) -> Select<E> {
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
    select
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
