//! `graph.link`: upsert two entities (or name existing ones) and relate
//! them. Upserts, so a repeated call changes nothing.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{failed, id_arg, scope};
use crate::{
    memory::graph::{Entity, NewEntity, NewRelation},
    tools::{ArtifactDef, Tool, ToolContext, ToolError, ToolOutput},
};

/// `graph.link`: upsert two entities and relate them.
pub struct Link;

/// One end of a link: an existing entity, or one to upsert.
fn end_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "id": {"type": "string"},
            "type": {"type": "string", "minLength": 1, "maxLength": 64},
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "key": {"type": "string", "minLength": 1, "maxLength": 200},
            "properties": {"type": "object"}
        }
    })
}

impl Link {
    /// The entity an end names, and its artifact role.
    async fn resolve(
        ctx: &ToolContext,
        end: Option<&Value>,
        which: &str,
    ) -> Result<(Entity, &'static str), ToolError> {
        let scope = scope(ctx);
        let Some(end) = end else {
            // `from` defaults to the task's subject.
            let id = ctx.subject_id.ok_or_else(|| {
                ToolError::fatal(format!(
                    "`{which}` is required when the task has no subject"
                ))
            })?;
            let entity = ctx
                .ports
                .graph
                .get(scope, id.into())
                .await
                .map_err(failed)?;
            return Ok((entity, "resolved"));
        };
        let has_fields = ["type", "name", "key", "properties"]
            .iter()
            .any(|k| end.get(k).is_some());
        match (id_arg(end, "id")?, has_fields) {
            (Some(Some(_)), true) => Err(ToolError::fatal(format!(
                "`{which}` names an entity by `id` or by `type` and `name`, not both"
            ))),
            (Some(Some(id)), false) => {
                let entity = ctx
                    .ports
                    .graph
                    .get(scope, id.into())
                    .await
                    .map_err(failed)?;
                Ok((entity, "resolved"))
            }
            _ => {
                let text = |k: &str| end.get(k).and_then(Value::as_str).map(str::to_owned);
                let (Some(entity_type), Some(name)) = (text("type"), text("name")) else {
                    return Err(ToolError::fatal(format!(
                        "`{which}` needs an `id`, or a `type` and a `name`"
                    )));
                };
                let (entity, created) = ctx
                    .ports
                    .graph
                    .upsert_entity(
                        scope,
                        NewEntity {
                            entity_type,
                            name,
                            key: text("key"),
                            properties: end.get("properties").cloned(),
                        },
                    )
                    .await
                    .map_err(failed)?;
                Ok((entity, if created { "created" } else { "updated" }))
            }
        }
    }
}

#[async_trait]
impl Tool for Link {
    fn key(&self) -> &str {
        "graph.link"
    }
    fn description(&self) -> &str {
        "Upsert two knowledge-graph entities (by type and name/key, or by id; `from` defaults \
         to the task's subject) and relate them."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "required": ["to", "relation"],
            "additionalProperties": false,
            "properties": {
                "from": end_schema(),
                "to": end_schema(),
                "relation": {"type": "string", "minLength": 1, "maxLength": 64},
                "weight": {"type": "number", "minimum": 0},
                "properties": {"type": "object"}
            }
        })
    }
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let (from, from_role) = Self::resolve(&ctx, args.get("from"), "from").await?;
        let (to, to_role) = Self::resolve(&ctx, args.get("to"), "to").await?;
        let (relation, created) = ctx
            .ports
            .graph
            .relate(
                scope(&ctx),
                NewRelation {
                    relation_type: args["relation"].as_str().unwrap_or_default().to_owned(),
                    from: from.id,
                    to: to.id,
                    weight: args.get("weight").and_then(Value::as_f64),
                    properties: args.get("properties").cloned(),
                    provenance: Some(format!("task:{}", ctx.task_id)),
                    ..NewRelation::default()
                },
            )
            .await
            .map_err(failed)?;
        let artifact = |kind: &str, role: &str, reference: String| ArtifactDef {
            kind: kind.into(),
            role: role.into(),
            reference,
            metadata: json!({}),
        };
        Ok(ToolOutput {
            output: json!({
                "from_id": from.id.to_string(),
                "to_id": to.id.to_string(),
                "relation_id": relation.id.to_string(),
                "relation_type": relation.relation_type,
                "created": {
                    "from": from_role == "created",
                    "to": to_role == "created",
                    "relation": created,
                },
            }),
            summary: format!(
                "{} {} relation",
                if created { "created a" } else { "updated the" },
                relation.relation_type
            ),
            artifacts: vec![
                artifact("entity", from_role, from.id.to_string()),
                artifact("entity", to_role, to.id.to_string()),
                artifact(
                    "relation",
                    if created { "created" } else { "updated" },
                    relation.id.to_string(),
                ),
            ],
            ..ToolOutput::default()
        })
    }
}
