//! Lists of plain records (a task's steps and events), resolved in one pass.
//!
//! async-graphql resolves every field of every object as a boxed future of
//! its own, polled through a `FuturesUnordered`: a page of 50 tasks with
//! their steps and last five events is some 1,500 such futures for fields
//! that only copy a value out of a row, and their allocation and polling
//! cost more than the rows did. A [`PlainList`] is the same GraphQL type as
//! `[T!]!` (it names and registers itself as `Vec<T>`). When the selection
//! on its items is only fields of `T::PLAIN` (and `__typename`), with no
//! directive, fragment, argument or sub-selection, it builds each item's
//! object directly; any other selection takes async-graphql's general path,
//! item by item, exactly as a `Vec<T>` would.
//!
//! Invariants:
//! - Both paths answer the same: [`Plain::plain`] gives what the field's
//!   resolver gives (`tests/e2e/dataloader.rs` asks for every plain field
//!   both ways and compares).
//! - Fields come in selection order, a repeated response key once, in the
//!   place of its first occurrence (what `super::order` restores for the
//!   general path).
//! - Only fields that take no argument and need no context are plain.

use std::borrow::Cow;

use async_graphql::{
    ContextSelectionSet, Name, OutputType, Positioned, ServerResult, Value,
    indexmap::IndexMap,
    parser::types::{Field, Selection},
    registry::Registry,
    resolver_utils::resolve_list,
};

/// An object type some of whose fields are plain values of the record.
pub trait Plain: OutputType {
    /// The GraphQL names of the fields [`Plain::plain`] answers.
    const PLAIN: &'static [&'static str];

    /// The value of field `name`, one of [`Plain::PLAIN`].
    fn plain(&self, name: &str) -> Value;
}

/// A list field's items, resolved in one pass when their selection allows.
pub struct PlainList<T>(pub Vec<T>);

impl<T: Plain> OutputType for PlainList<T> {
    fn type_name() -> Cow<'static, str> {
        <Vec<T> as OutputType>::type_name()
    }

    fn qualified_type_name() -> String {
        <Vec<T> as OutputType>::qualified_type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        <Vec<T> as OutputType>::create_type_info(registry)
    }

    async fn resolve(
        &self,
        ctx: &ContextSelectionSet<'_>,
        field: &Positioned<Field>,
    ) -> ServerResult<Value> {
        let Some(fields) = plain_selection::<T>(ctx) else {
            return resolve_list(ctx, field, &self.0, Some(self.0.len())).await;
        };
        Ok(Value::List(
            self.0
                .iter()
                .map(|item| {
                    let mut object = IndexMap::with_capacity(fields.len());
                    for (key, name) in &fields {
                        if object.contains_key(*key) {
                            continue;
                        }
                        let value = if *name == "__typename" {
                            Value::String(item.introspection_type_name().into_owned())
                        } else {
                            item.plain(name)
                        };
                        object.insert((*key).clone(), value);
                    }
                    Value::Object(object)
                })
                .collect(),
        ))
    }
}

/// The response key and field name of each selected field, when every
/// selection is a plain field of `T`.
fn plain_selection<'a, T: Plain>(
    ctx: &'a ContextSelectionSet<'_>,
) -> Option<Vec<(&'a Name, &'a str)>> {
    ctx.item
        .node
        .items
        .iter()
        .map(|selection| match &selection.node {
            Selection::Field(field) => {
                let field = &field.node;
                let name = field.name.node.as_str();
                let plain = field.directives.is_empty()
                    && field.arguments.is_empty()
                    && field.selection_set.node.items.is_empty()
                    && (name == "__typename" || T::PLAIN.contains(&name));
                plain.then_some((&field.response_key().node, name))
            }
            Selection::FragmentSpread(_) | Selection::InlineFragment(_) => None,
        })
        .collect()
}
