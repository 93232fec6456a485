//! Selection order: each object in a response lists its fields in the order
//! the selection set names them, as the GraphQL specification requires.
//!
//! async-graphql resolves a query's fields concurrently and writes each
//! object's fields in the order they finish, so a field that waits on the
//! database lands after one that does not. Once an operation has run (over
//! HTTP or WebSocket, and for each event of a subscription),
//! [`in_selection_order`] moves each object's fields back into place, from
//! the operation's parsed document (see `super::operation`).
//!
//! Invariants:
//! - A response key's place is that of its first occurrence in the
//!   selection set, fragments expanded in place (the specification's
//!   `CollectFields`); a fragment is expanded once per selection set.
//! - Only the order changes: no key is added, dropped or altered. A key the
//!   document does not name (none should exist) keeps its relative place
//!   after the named ones.
//! - The work is linear in the response: a selection is planned once,
//!   when the first value it selects is reached, and every object it
//!   selects (a list's items, the same field of each of them) shares that
//!   plan; an object already in order is left as it is.

use std::{cell::OnceCell, collections::HashSet};

use async_graphql::{
    Name, Value,
    parser::types::{DocumentOperations, ExecutableDocument, Selection, SelectionSet},
};

/// The name of the document's subscription operation, if it names one.
pub(crate) fn subscription_name(document: &ExecutableDocument) -> Option<String> {
    use async_graphql::parser::types::OperationType;
    match &document.operations {
        DocumentOperations::Single(_) => None,
        DocumentOperations::Multiple(operations) => operations
            .iter()
            .find(|(_, op)| op.node.ty == OperationType::Subscription)
            .map(|(name, _)| name.to_string()),
    }
}

/// Reorders `data`, the result of `operation_name` in `document`.
pub fn in_selection_order(
    data: &mut Value,
    document: &ExecutableDocument,
    operation_name: Option<&str>,
) {
    let operation = match (&document.operations, operation_name) {
        (DocumentOperations::Single(op), _) => op,
        (DocumentOperations::Multiple(ops), Some(name)) => match ops.get(name) {
            Some(op) => op,
            None => return,
        },
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => match ops.values().next() {
            Some(op) => op,
            None => return,
        },
        (DocumentOperations::Multiple(_), None) => return,
    };
    reorder(data, &[&operation.node.selection_set.node], document);
}

/// The response keys a merged selection produces, in order, each with the
/// selection sets its own value is selected by and, once a value needs it,
/// the plan of those (made once per selection, however many objects of a
/// list share it).
struct Plan<'d> {
    keys: Vec<&'d Name>,
    children: Vec<Vec<&'d SelectionSet>>,
    plans: Vec<OnceCell<Plan<'d>>>,
}

fn plan<'d>(sets: &[&'d SelectionSet], document: &'d ExecutableDocument) -> Plan<'d> {
    let mut plan = Plan {
        keys: Vec::new(),
        children: Vec::new(),
        plans: Vec::new(),
    };
    let mut expanded = HashSet::new();
    for set in sets {
        collect(set, document, &mut expanded, &mut plan);
    }
    plan.plans = plan.keys.iter().map(|_| OnceCell::new()).collect();
    plan
}

fn collect<'d>(
    set: &'d SelectionSet,
    document: &'d ExecutableDocument,
    expanded: &mut HashSet<&'d Name>,
    plan: &mut Plan<'d>,
) {
    for selection in &set.items {
        match &selection.node {
            Selection::Field(field) => {
                let key = &field.node.response_key().node;
                let child = &field.node.selection_set.node;
                match plan.keys.iter().position(|k| *k == key) {
                    Some(at) => plan.children[at].push(child),
                    None => {
                        plan.keys.push(key);
                        plan.children.push(vec![child]);
                    }
                }
            }
            Selection::FragmentSpread(spread) => {
                let name = &spread.node.fragment_name.node;
                if expanded.insert(name)
                    && let Some(fragment) = document.fragments.get(name)
                {
                    collect(&fragment.node.selection_set.node, document, expanded, plan);
                }
            }
            Selection::InlineFragment(inline) => {
                collect(&inline.node.selection_set.node, document, expanded, plan);
            }
        }
    }
}

/// Reorders `value`, selected by `sets`, and everything below it.
fn reorder(value: &mut Value, sets: &[&SelectionSet], document: &ExecutableDocument) {
    if selects_within(value, sets) {
        apply(value, &plan(sets, document), document);
    }
}

/// Whether `value` has fields for `sets` to order.
fn selects_within(value: &Value, sets: &[&SelectionSet]) -> bool {
    matches!(value, Value::Object(_) | Value::List(_)) && sets.iter().any(|s| !s.items.is_empty())
}

fn apply<'d>(value: &mut Value, plan: &Plan<'d>, document: &'d ExecutableDocument) {
    match value {
        Value::List(items) => {
            for item in items {
                apply(item, plan, document);
            }
        }
        Value::Object(map) => {
            let mut place = 0;
            for (at_key, key) in plan.keys.iter().enumerate() {
                // A field already in its place (the usual case) is found
                // without hashing its key.
                let at = match map.get_index(place) {
                    Some((k, _)) if k == *key => place,
                    _ => match map.get_index_of(*key) {
                        Some(at) => at,
                        None => continue,
                    },
                };
                if at != place {
                    map.move_index(at, place);
                }
                if let Some((_, child)) = map.get_index_mut(place) {
                    let sets = &plan.children[at_key];
                    if selects_within(child, sets) {
                        let below = plan.plans[at_key].get_or_init(|| self::plan(sets, document));
                        apply(child, below, document);
                    }
                }
                place += 1;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &Value) -> Vec<String> {
        match value {
            Value::Object(map) => map.keys().map(|k| k.to_string()).collect(),
            other => panic!("not an object: {other}"),
        }
    }

    fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
        match value {
            Value::Object(map) => &map[name],
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn objects_and_list_items_follow_the_selection_with_fragments_and_aliases() {
        let document = async_graphql::parser::parse_query(
            "query { z: a list { y x ...F } b ... on Query { c a } } \
             fragment F on Item { w x: x2 ...F }",
        )
        .unwrap();
        let mut data = Value::from_json(serde_json::json!({
            "c": 1,
            "b": 2,
            "list": [
                {"w": 1, "x": 2, "y": 3},
                {"x": 2, "y": 3, "w": 1},
                null
            ],
            "z": 3,
            "a": 4,
        }))
        .unwrap();
        in_selection_order(&mut data, &document, None);
        assert_eq!(keys(&data), ["z", "list", "b", "c", "a"]);
        let Value::List(items) = field(&data, "list") else {
            panic!("a list");
        };
        assert_eq!(keys(&items[0]), ["y", "x", "w"]);
        assert_eq!(keys(&items[1]), ["y", "x", "w"]);
        assert_eq!(items[2], Value::Null);
    }

    #[test]
    fn a_key_the_document_does_not_name_stays_after_the_named_ones() {
        let document = async_graphql::parser::parse_query("{ b a }").unwrap();
        let mut data = Value::from_json(serde_json::json!({"extra": 0, "a": 1, "b": 2})).unwrap();
        in_selection_order(&mut data, &document, None);
        assert_eq!(keys(&data), ["b", "a", "extra"]);
    }

    #[test]
    fn the_named_operation_of_several_is_the_one_followed() {
        let document =
            async_graphql::parser::parse_query("query A { a b } query B { b a }").unwrap();
        let mut data = Value::from_json(serde_json::json!({"a": 1, "b": 2})).unwrap();
        in_selection_order(&mut data, &document, Some("B"));
        assert_eq!(keys(&data), ["b", "a"]);
        in_selection_order(&mut data, &document, Some("A"));
        assert_eq!(keys(&data), ["a", "b"]);
    }
}
