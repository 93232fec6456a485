//! JSON Schemas for MCP tools, generated from the GraphQL schema's SDL:
//! a tool's input is the arguments of the root field it runs, and a field
//! whose only argument is an `input` object takes that object's fields
//! directly (`startTask(input: StartTaskInput!)` becomes a tool whose
//! properties are `StartTaskInput`'s fields). A field added to the GraphQL
//! type is therefore in the tool's schema too: the two are one declaration.
//!
//! Invariants: a non-null argument or field without a default is
//! `required`; a default is the schema's `default`; enums list their
//! values; nested input objects are expanded (the schema has no recursive
//! input type, and a recursive one would be cut off as a plain `object`);
//! the `JSON` scalar is any value.

use std::collections::{BTreeMap, HashSet};

use async_graphql::parser::{
    Positioned,
    types::{BaseType, FieldDefinition, InputValueDefinition, Type, TypeKind},
};
use serde_json::{Map, Value, json};

/// The type definitions of the SDL, by name.
pub struct Sdl {
    types: BTreeMap<String, TypeKind>,
    descriptions: BTreeMap<String, String>,
}

/// Which root type a field belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    Query,
    Mutation,
}

impl Root {
    pub fn type_name(self) -> &'static str {
        match self {
            Root::Query => "Query",
            Root::Mutation => "Mutation",
        }
    }

    pub fn keyword(self) -> &'static str {
        match self {
            Root::Query => "query",
            Root::Mutation => "mutation",
        }
    }
}

/// What a tool's arguments become in its GraphQL operation.
#[derive(Clone, Debug)]
pub enum Arguments {
    /// The field takes one `input` object of this type: the tool's
    /// arguments are its fields, sent as `$input`.
    Input { type_name: String },
    /// The field's own arguments, each with its GraphQL type.
    Fields { types: BTreeMap<String, String> },
}

/// A root field, as a tool sees it.
#[derive(Clone, Debug)]
pub struct FieldShape {
    pub description: Option<String>,
    pub input_schema: Map<String, Value>,
    pub arguments: Arguments,
}

impl Sdl {
    pub fn parse(sdl: &str) -> Result<Self, String> {
        use async_graphql::parser::types::TypeSystemDefinition;
        let document = async_graphql::parser::parse_schema(sdl).map_err(|e| e.to_string())?;
        let mut types = BTreeMap::new();
        let mut descriptions = BTreeMap::new();
        for definition in document.definitions {
            if let TypeSystemDefinition::Type(ty) = definition {
                let ty = ty.node;
                if let Some(d) = ty.description {
                    descriptions.insert(ty.name.node.to_string(), d.node);
                }
                types.insert(ty.name.node.to_string(), ty.kind);
            }
        }
        Ok(Self {
            types,
            descriptions,
        })
    }

    /// The shape of `root.field`, or why there is none.
    pub fn field(&self, root: Root, field: &str) -> Result<FieldShape, String> {
        let Some(TypeKind::Object(object)) = self.types.get(root.type_name()) else {
            return Err(format!("the schema has no {} type", root.type_name()));
        };
        let definition: &FieldDefinition = object
            .fields
            .iter()
            .map(|f| &f.node)
            .find(|f| f.name.node.as_str() == field)
            .ok_or_else(|| format!("{} has no field `{field}`", root.type_name()))?;
        let description = definition.description.as_ref().map(|d| d.node.clone());
        if let [only] = definition.arguments.as_slice()
            && only.node.name.node.as_str() == "input"
            && let BaseType::Named(name) = &only.node.ty.node.base
            && let Some(TypeKind::InputObject(input)) = self.types.get(name.as_str())
        {
            let mut schema = self.object_schema(&input.fields, &mut HashSet::new());
            if let Some(d) = self.descriptions.get(name.as_str()) {
                schema.insert("description".into(), json!(d));
            }
            return Ok(FieldShape {
                description,
                input_schema: schema,
                arguments: Arguments::Input {
                    type_name: name.to_string(),
                },
            });
        }
        Ok(FieldShape {
            description,
            input_schema: self.object_schema(&definition.arguments, &mut HashSet::new()),
            arguments: Arguments::Fields {
                types: definition
                    .arguments
                    .iter()
                    .map(|a| (a.node.name.node.to_string(), a.node.ty.node.to_string()))
                    .collect(),
            },
        })
    }

    /// An object schema with one property per input value.
    fn object_schema(
        &self,
        values: &[Positioned<InputValueDefinition>],
        open: &mut HashSet<String>,
    ) -> Map<String, Value> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for value in values.iter().map(|v| &v.node) {
            let name = value.name.node.to_string();
            let mut schema = self.type_schema(&value.ty.node, open);
            if let Some(d) = &value.description {
                schema.insert("description".into(), json!(d.node));
            }
            match &value.default_value {
                Some(default) => {
                    schema.insert(
                        "default".into(),
                        default.node.clone().into_json().unwrap_or(Value::Null),
                    );
                }
                None if !value.ty.node.nullable => required.push(json!(name)),
                None => {}
            }
            properties.insert(name, Value::Object(schema));
        }
        let mut object = Map::new();
        object.insert("type".into(), json!("object"));
        object.insert("properties".into(), Value::Object(properties));
        if !required.is_empty() {
            object.insert("required".into(), Value::Array(required));
        }
        object.insert("additionalProperties".into(), json!(false));
        object
    }

    fn type_schema(&self, ty: &Type, open: &mut HashSet<String>) -> Map<String, Value> {
        let mut schema = match &ty.base {
            BaseType::List(item) => {
                let mut list = Map::new();
                list.insert("type".into(), json!("array"));
                list.insert("items".into(), Value::Object(self.type_schema(item, open)));
                list
            }
            BaseType::Named(name) => self.named_schema(name.as_str(), open),
        };
        if ty.nullable
            && let Some(Value::String(t)) = schema.get("type").cloned()
        {
            schema.insert("type".into(), json!([t, "null"]));
        }
        schema
    }

    fn named_schema(&self, name: &str, open: &mut HashSet<String>) -> Map<String, Value> {
        let scalar = |t: &str| {
            let mut m = Map::new();
            m.insert("type".into(), json!(t));
            m
        };
        let mut schema = match name {
            "String" | "ID" => scalar("string"),
            "Int" => scalar("integer"),
            "Float" => scalar("number"),
            "Boolean" => scalar("boolean"),
            "JSON" => Map::new(),
            "DateTime" => {
                let mut m = scalar("string");
                m.insert("format".into(), json!("date-time"));
                m
            }
            "UUID" => {
                let mut m = scalar("string");
                m.insert("format".into(), json!("uuid"));
                m
            }
            _ => match self.types.get(name) {
                Some(TypeKind::Enum(e)) => {
                    let mut m = scalar("string");
                    let values: Vec<Value> = e
                        .values
                        .iter()
                        .map(|v| json!(v.node.value.node.as_str()))
                        .collect();
                    m.insert("enum".into(), Value::Array(values));
                    m
                }
                Some(TypeKind::InputObject(input)) if open.insert(name.to_owned()) => {
                    let object = self.object_schema(&input.fields, open);
                    open.remove(name);
                    object
                }
                // A custom scalar, or an input type inside itself.
                Some(TypeKind::InputObject(_)) => scalar("object"),
                _ => scalar("string"),
            },
        };
        if let Some(d) = self.descriptions.get(name)
            && !schema.contains_key("description")
        {
            schema.insert("description".into(), json!(d));
        }
        schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SDL: &str = r#"
        enum Mode { FAST SLOW }
        input Inner { a: Int! b: [String!] }
        input DoInput { name: String! mode: Mode! = FAST inner: Inner extra: JSON }
        type Query { thing(id: ID!, limit: Int! = 10): String }
        type Mutation { doIt(input: DoInput!): String }
    "#;

    #[test]
    fn an_input_object_argument_becomes_the_tool_s_properties() {
        let sdl = Sdl::parse(SDL).unwrap();
        let shape = sdl.field(Root::Mutation, "doIt").unwrap();
        let schema = Value::Object(shape.input_schema);
        assert_eq!(schema["required"], json!(["name"]));
        assert_eq!(
            schema["properties"]["mode"]["enum"],
            json!(["FAST", "SLOW"])
        );
        assert_eq!(schema["properties"]["mode"]["default"], json!("FAST"));
        assert_eq!(
            schema["properties"]["inner"]["type"],
            json!(["object", "null"])
        );
        assert_eq!(schema["properties"]["inner"]["required"], json!(["a"]));
        assert_eq!(
            schema["properties"]["inner"]["properties"]["b"]["items"]["type"],
            json!("string")
        );
        assert!(schema["properties"]["extra"].get("type").is_none());
        assert!(
            matches!(shape.arguments, Arguments::Input { ref type_name } if type_name == "DoInput")
        );
    }

    #[test]
    fn a_field_s_own_arguments_keep_their_types_and_defaults() {
        let sdl = Sdl::parse(SDL).unwrap();
        let shape = sdl.field(Root::Query, "thing").unwrap();
        let schema = Value::Object(shape.input_schema);
        assert_eq!(schema["required"], json!(["id"]));
        assert_eq!(schema["properties"]["limit"]["default"], json!(10));
        let Arguments::Fields { types } = shape.arguments else {
            panic!("own arguments")
        };
        assert_eq!(types["id"], "ID!");
        assert!(sdl.field(Root::Query, "missing").is_err());
    }
}
