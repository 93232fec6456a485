//! Which argument an execution-time coercion error is about.
//!
//! async-graphql checks argument values against their types while it
//! resolves a field, not before: an `Int` beyond 32 bits, a malformed
//! `DateTime`, a string where an input object belongs fail there, with the
//! field's path and the position of the offending argument value. Those
//! errors are the caller's, so [`crate::error::ensure_codes`] codes them
//! `BAD_USER_INPUT` rather than masking them as `INTERNAL`, and names the
//! variable (or the argument, for a literal) from this module.
//!
//! Invariants:
//! - only a position that is exactly an argument value's position in the
//!   request's own document counts: a resolver's own uncoded error sits at
//!   its field's position and stays `INTERNAL`;
//! - this runs only for responses that carry such an error, so it re-parses
//!   the document instead of making every request keep its parse.

use async_graphql::{
    Pos, Value,
    parser::{
        parse_query,
        types::{Field, Selection, SelectionSet},
    },
};

/// The argument at a position, and the variables its value is made of.
#[derive(Debug, PartialEq, Eq)]
pub struct ArgumentSite {
    pub field: String,
    pub argument: String,
    pub variables: Vec<String>,
}

impl ArgumentSite {
    /// What the caller should fix, for an error message.
    pub fn describe(&self) -> String {
        let argument = format!("argument `{}` of `{}`", self.argument, self.field);
        match self.variables.as_slice() {
            [] => argument,
            [one] => format!("variable `${one}` ({argument})"),
            many => {
                let names: Vec<String> = many.iter().map(|v| format!("`${v}`")).collect();
                format!("variables {} ({argument})", names.join(", "))
            }
        }
    }
}

/// The argument whose value starts at `pos` in `query`, if any.
pub fn argument_at(query: &str, pos: Pos) -> Option<ArgumentSite> {
    let document = parse_query(query).ok()?;
    let operations = document
        .operations
        .iter()
        .map(|(_, op)| &op.node.selection_set.node);
    let fragments = document
        .fragments
        .values()
        .map(|f| &f.node.selection_set.node);
    operations
        .chain(fragments)
        .find_map(|set| in_selection_set(set, pos))
}

fn in_selection_set(set: &SelectionSet, pos: Pos) -> Option<ArgumentSite> {
    set.items.iter().find_map(|item| match &item.node {
        Selection::Field(field) => in_field(&field.node, pos),
        Selection::InlineFragment(inline) => in_selection_set(&inline.node.selection_set.node, pos),
        Selection::FragmentSpread(_) => None,
    })
}

fn in_field(field: &Field, pos: Pos) -> Option<ArgumentSite> {
    let own = field.arguments.iter().find(|(_, value)| value.pos == pos);
    if let Some((name, value)) = own {
        let mut variables = Vec::new();
        // Substituting nulls walks the whole value and reports each variable.
        let _ = value.node.clone().into_const_with(|variable| {
            variables.push(variable.to_string());
            Ok::<_, std::convert::Infallible>(Value::Null)
        });
        return Some(ArgumentSite {
            field: field.name.node.to_string(),
            argument: name.node.to_string(),
            variables,
        });
    }
    in_selection_set(&field.selection_set.node, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(query: &str, line: usize, column: usize) -> Option<ArgumentSite> {
        argument_at(query, Pos { line, column })
    }

    #[test]
    fn a_variable_argument_names_the_variable() {
        let query = "query($f: AuditFilter) {\n  auditLog(filter: $f) { totalCount }\n}";
        let found = site(query, 2, 20).expect("the argument at 2:20");
        assert_eq!(found.field, "auditLog");
        assert_eq!(found.argument, "filter");
        assert_eq!(found.variables, ["f"]);
        assert_eq!(
            found.describe(),
            "variable `$f` (argument `filter` of `auditLog`)"
        );
    }

    #[test]
    fn a_literal_names_the_argument_and_nested_variables_are_found() {
        let query = "{ a { b(first: 99999999999) } c(filter: {since: $s, until: $u}) }";
        let literal = site(query, 1, 16).expect("the literal at 1:16");
        assert_eq!(literal.describe(), "argument `first` of `b`");
        let nested = site(query, 1, 41).expect("the object at 1:41");
        assert_eq!(nested.variables, ["s", "u"]);
    }

    #[test]
    fn other_positions_and_fragments() {
        let query = "query { ...F } fragment F on Query { x(id: 1) }";
        assert_eq!(site(query, 1, 44).map(|s| s.argument), Some("id".into()));
        // The field's own position is a resolver's error, not an argument's.
        assert_eq!(site(query, 1, 38), None);
        assert_eq!(site("{ not valid", 1, 3), None);
    }
}
