//! Publishing a capability (platform admins, through an audited
//! [`PlatformScope`]): the definition ([`CapabilityDef`]), its check, the
//! write of a new version, and the signing secret of its partner tools.
//!
//! A definition is checked whole before anything is stored, each problem
//! named ([`check_capability`]); its plans get the same integrity check as
//! `publishPlan`, with its own partner tools counted as registered. A plan
//! or tool key belongs to one capability. Each publish bumps the version,
//! guarded by the version read, so of two concurrent publishes one wins and
//! the other is a `Conflict`. The signing secret is shown once (first
//! publish or rotation) and stored only sealed, bound to the capability's
//! id.

use crate::kernel::db::BeginWrite;
use std::{collections::HashSet, fmt, sync::Arc};

use brainstem_entity::{CapabilityId, PlanId, capability, capability_plan, capability_tool};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter,
    sea_query::Expr,
};
use serde_json::json;

use super::{
    Capabilities, Capability, Limits, MAX_TOOL_TIMEOUT_MS, PARTNER_PREFIX, PartnerToolDef,
    SECRET_PREFIX, partner,
};
use crate::{
    Error, PlatformScope, Result,
    catalogue::{
        plans::{self, PlanDef},
        tool::{Tool, ToolRegistry},
    },
    kernel::{
        crypto::Sealed,
        row_security::{Bypass, as_platform},
    },
};

/// What a platform admin publishes.
#[derive(Clone, Debug)]
pub struct CapabilityDef {
    pub key: String,
    pub name: String,
    pub description: String,
    pub plans: Vec<PlanDef>,
    pub tools: Vec<PartnerToolDef>,
    pub limits: Limits,
    /// Replace the signing secret (a new one is shown once).
    pub rotate_secret: bool,
}

/// A published capability, with its signing secret when it is new (first
/// publish or rotation): shown this once, stored only encrypted.
#[derive(Clone)]
pub struct Published {
    pub capability: Capability,
    pub signing_secret: Option<String>,
}

impl fmt::Debug for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Published")
            .field("capability", &self.capability)
            .field("new_signing_secret", &self.signing_secret.is_some())
            .finish()
    }
}

impl Capabilities {
    /// Publish a capability, or a new version of one (platform admins).
    pub async fn publish(&self, scope: &PlatformScope, def: CapabilityDef) -> Result<Published> {
        check_capability(&def, &self.registry)?;
        // The catalogue is platform data; its audit row has no tenant.
        let txn = as_platform(Bypass::PlatformAdmin, self.db.begin_write()).await?;
        let existing = capability::Entity::find()
            .filter(capability::Column::Key.eq(&def.key))
            .one(&txn)
            .await?;
        let id = existing
            .as_ref()
            .map(|c| CapabilityId::from(c.id))
            .unwrap_or_default();
        refuse_foreign_keys(&txn, id, &def).await?;
        let now = Utc::now();
        let new_secret = (existing.is_none() || def.rotate_secret).then(new_signing_secret);
        let sealed = match &new_secret {
            Some(secret) => Some(
                self.keyring()?
                    .seal(secret.as_bytes(), secret_context(id).as_bytes())?,
            ),
            None => None,
        };
        let model = match existing {
            None => {
                let sealed =
                    sealed.ok_or_else(|| Error::internal("no secret for a new capability"))?;
                capability::ActiveModel {
                    id: Set(id.uuid()),
                    key: Set(def.key.clone()),
                    name: Set(def.name.clone()),
                    description: Set(def.description.clone()),
                    version: Set(1),
                    limits: Set(def.limits.to_json()),
                    secret_ciphertext: Set(sealed.ciphertext),
                    secret_key_id: Set(sealed.key_id),
                    published_by: Set(scope.actor().to_owned()),
                    created_at: Set(now),
                    updated_at: Set(now),
                    archived_at: Set(None),
                }
                .insert(&txn)
                .await
                .map_err(|e| published_concurrently(e, &def.key))?
            }
            Some(row) => {
                let mut active: capability::ActiveModel = row.clone().into();
                active.name = Set(def.name.clone());
                active.description = Set(def.description.clone());
                active.version = Set(row.version + 1);
                active.limits = Set(def.limits.to_json());
                if let Some(sealed) = sealed {
                    active.secret_ciphertext = Set(sealed.ciphertext);
                    active.secret_key_id = Set(sealed.key_id);
                }
                active.published_by = Set(scope.actor().to_owned());
                active.updated_at = Set(now);
                // A new version is current again.
                active.archived_at = Set(None);
                // Guarded by the version read above: of two concurrent
                // publishes, one wins and the other is told to try again.
                let updated = capability::Entity::update_many()
                    .set(active)
                    .filter(capability::Column::Id.eq(row.id))
                    .filter(capability::Column::Version.eq(row.version))
                    .exec_with_returning(&txn)
                    .await?;
                updated.into_iter().next().ok_or_else(|| {
                    Error::Conflict(format!(
                        "capability `{}` was published concurrently; publish again",
                        def.key
                    ))
                })?
            }
        };
        for plan in &def.plans {
            capability_plan::ActiveModel {
                id: Set(PlanId::new().uuid()),
                capability_id: Set(id.uuid()),
                version: Set(model.version),
                key: Set(plan.key.clone()),
                intent: Set(plan.intent.clone()),
                description: Set(plan.description.clone()),
                priority: Set(plan.priority),
                patterns: Set(json!(plan.patterns)),
                steps: Set(serde_json::to_value(&plan.steps).map_err(Error::internal)?),
                created_by: Set(scope.actor().to_owned()),
                created_at: Set(now),
            }
            .insert(&txn)
            .await
            .map_err(|e| published_concurrently(e, &def.key))?;
        }
        capability_tool::Entity::delete_many()
            .filter(capability_tool::Column::CapabilityId.eq(id.uuid()))
            .exec(&txn)
            .await?;
        for tool in &def.tools {
            capability_tool::ActiveModel {
                id: Set(uuid::Uuid::now_v7()),
                capability_id: Set(id.uuid()),
                key: Set(tool.key.clone()),
                description: Set(tool.description.clone()),
                url: Set(tool.url.clone()),
                input_schema: Set(tool.input_schema.clone()),
                output_schema: Set(tool.output_schema.clone()),
                timeout_ms: Set(i64::try_from(tool.timeout_ms).unwrap_or(i64::MAX)),
                retry: Set(tool.retry.map(|r| serde_json::json!(r))),
                created_at: Set(now),
            }
            .insert(&txn)
            .await
            .map_err(|e| published_concurrently(e, &def.key))?;
        }
        txn.commit().await?;
        tracing::info!(
            capability = %def.key,
            version = model.version,
            plans = def.plans.len(),
            tools = def.tools.len(),
            audit = %scope.audit_id(),
            "capability published"
        );
        Ok(Published {
            capability: Capability::from(&model),
            signing_secret: new_secret,
        })
    }

    /// The secret that signs calls to a capability's partner tools. One
    /// sealed with an old key is re-sealed with the current one on the way.
    /// Archive (`archived`) or restore a capability (platform admins,
    /// through an audited scope). Archived, it starts no new task for its
    /// subscribers, is not chosen by intent detection and takes no new
    /// subscription; tasks already started finish, their partner tools
    /// still answering. Returns it as it now is.
    pub async fn set_archived(
        &self,
        _scope: &PlatformScope,
        key: &str,
        archived: bool,
        now: chrono::DateTime<Utc>,
    ) -> Result<Capability> {
        let changed = as_platform(
            Bypass::PlatformAdmin,
            capability::Entity::update_many()
                .col_expr(
                    capability::Column::ArchivedAt,
                    sea_orm::sea_query::Expr::value(archived.then_some(now)),
                )
                .filter(capability::Column::Key.eq(key))
                .exec(&self.db),
        )
        .await?
        .rows_affected;
        if changed == 0 {
            return Err(Error::not_found(format!("capability `{key}`")));
        }
        self.get_by_key(key).await
    }

    pub(crate) async fn signing_secret(&self, id: CapabilityId) -> Result<String> {
        let row = capability::Entity::find_by_id(id.uuid())
            .one(&self.db)
            .await?
            .ok_or_else(|| Error::not_found("capability"))?;
        self.open_and_reseal(&row).await
    }

    /// Re-seal with the current key every capability signing secret that an
    /// old key sealed (platform admins); returns how many. Calls re-seal a
    /// secret they use, but a capability no task calls would keep the old
    /// key without this.
    pub async fn reencrypt(&self, _scope: &PlatformScope) -> Result<u64> {
        let current = self.keyring()?.current_key_id().to_owned();
        // capabilities are the platform's catalogue, not a tenant's rows.
        let stale = as_platform(
            Bypass::PlatformAdmin,
            capability::Entity::find()
                .filter(capability::Column::SecretKeyId.ne(current))
                .all(&self.db),
        )
        .await?;
        let mut count = 0;
        for row in stale {
            self.open_and_reseal(&row).await?;
            count += 1;
        }
        Ok(count)
    }

    /// A capability's signing secret, re-sealed with the current key on
    /// the way if an old one sealed it.
    async fn open_and_reseal(&self, row: &capability::Model) -> Result<String> {
        let id = CapabilityId::from(row.id);
        let keyring = self.keyring()?;
        let plaintext = keyring.open(
            &Sealed {
                key_id: row.secret_key_id.clone(),
                ciphertext: row.secret_ciphertext.clone(),
            },
            secret_context(id).as_bytes(),
        )?;
        let secret = String::from_utf8(plaintext)
            .map_err(|_| Error::internal("a decrypted signing secret is not text"))?;
        if row.secret_key_id != keyring.current_key_id() {
            let sealed = keyring.seal(secret.as_bytes(), secret_context(id).as_bytes())?;
            capability::Entity::update_many()
                .col_expr(
                    capability::Column::SecretCiphertext,
                    Expr::value(sealed.ciphertext),
                )
                .col_expr(capability::Column::SecretKeyId, Expr::value(sealed.key_id))
                .filter(capability::Column::Id.eq(id.uuid()))
                .exec(&self.db)
                .await?;
        }
        Ok(secret)
    }
}

fn valid_key(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// Check a definition before anything is stored: names, tools, and every
/// plan with the same integrity check as `publishPlan` (the capability's
/// own partner tools count as registered).
fn check_capability(def: &CapabilityDef, registry: &ToolRegistry) -> Result<()> {
    let mut errors = Vec::new();
    if !valid_key(&def.key, 100) {
        errors.push(format!(
            "capability key `{}` needs 1-100 characters of letters, digits, `_`, `-`, `.`, `:`",
            def.key
        ));
    }
    if def.name.trim().is_empty() || def.name.len() > 255 {
        errors.push("a capability's name needs 1-255 characters".to_owned());
    }
    if def.description.len() > 10_000 {
        errors.push("a capability's description has at most 10000 characters".to_owned());
    }
    if def.limits.max_tasks_per_month == Some(0) {
        errors.push("limits.maxTasksPerMonth must be at least 1 (omit it for no limit)".to_owned());
    }
    let mut tool_keys = HashSet::new();
    for tool in &def.tools {
        let at = format!("tool `{}`", tool.key);
        let name = tool.key.strip_prefix(PARTNER_PREFIX).unwrap_or_default();
        if !valid_key(name, 100) {
            errors.push(format!(
                "{at}: a partner tool's key is `{PARTNER_PREFIX}` and 1-100 characters of letters, digits, `_`, `-`, `.`, `:`"
            ));
        }
        if registry.contains(&tool.key) {
            errors.push(format!("{at}: a built-in tool has this key"));
        }
        if !tool_keys.insert(tool.key.clone()) {
            errors.push(format!("{at}: declared twice"));
        }
        match reqwest::Url::parse(&tool.url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {}
            _ => errors.push(format!("{at}: url must be an http(s) URL")),
        }
        if !(1..=MAX_TOOL_TIMEOUT_MS).contains(&tool.timeout_ms) {
            errors.push(format!(
                "{at}: timeoutMs must be between 1 and {MAX_TOOL_TIMEOUT_MS}"
            ));
        }
        if let Some(retry) = &tool.retry
            && let Err(e) = retry.check()
        {
            errors.push(format!("{at}: retry.{e}"));
        }
        if !tool.input_schema.is_object() {
            errors.push(format!("{at}: inputSchema must be a JSON Schema object"));
        }
        if tool.output_schema.as_ref().is_some_and(|s| !s.is_object()) {
            errors.push(format!("{at}: outputSchema must be a JSON Schema object"));
        }
    }
    let own: Vec<Arc<dyn Tool>> = def
        .tools
        .iter()
        .map(|t| Arc::new(partner::PartnerTool::unsigned(t.clone())) as Arc<dyn Tool>)
        .collect();
    let registry = registry.with_extra(own);
    let mut plan_keys = HashSet::new();
    for plan in &def.plans {
        if !plan_keys.insert(plan.key.clone()) {
            errors.push(format!("plan `{}`: declared twice", plan.key));
        }
        if let Err(e) = plans::check_plan(plan, &registry) {
            errors.push(e.to_string());
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Validation(format!(
            "capability `{}` is invalid: {}",
            def.key,
            errors.join("; ")
        )))
    }
}

/// A plan or tool key belongs to one capability: refuse keys another one
/// already has, naming it.
async fn refuse_foreign_keys<C: ConnectionTrait>(
    db: &C,
    id: CapabilityId,
    def: &CapabilityDef,
) -> Result<()> {
    let plan_keys: Vec<&str> = def.plans.iter().map(|p| p.key.as_str()).collect();
    let taken_plan = capability_plan::Entity::find()
        .filter(capability_plan::Column::Key.is_in(plan_keys))
        .filter(capability_plan::Column::CapabilityId.ne(id.uuid()))
        .one(db)
        .await?;
    let tool_keys: Vec<&str> = def.tools.iter().map(|t| t.key.as_str()).collect();
    let taken_tool = capability_tool::Entity::find()
        .filter(capability_tool::Column::Key.is_in(tool_keys))
        .filter(capability_tool::Column::CapabilityId.ne(id.uuid()))
        .one(db)
        .await?;
    let (what, key, owner) = match (taken_plan, taken_tool) {
        (Some(p), _) => ("plan", p.key, p.capability_id),
        (None, Some(t)) => ("tool", t.key, t.capability_id),
        (None, None) => return Ok(()),
    };
    let owner = capability::Entity::find_by_id(owner)
        .one(db)
        .await?
        .map(|c| c.key)
        .unwrap_or_default();
    Err(Error::Conflict(format!(
        "{what} `{key}` belongs to capability `{owner}`"
    )))
}

fn published_concurrently(err: sea_orm::DbErr, key: &str) -> Error {
    match Error::from(err) {
        Error::Conflict(_) => Error::Conflict(format!(
            "capability `{key}` was published concurrently; publish again"
        )),
        other => other,
    }
}

fn new_signing_secret() -> String {
    crate::kernel::crypto::random_secret(SECRET_PREFIX)
}

/// What a signing secret's ciphertext is bound to.
fn secret_context(id: CapabilityId) -> String {
    format!("brainstem.capability:{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::WithBuiltins;

    fn tool(key: &str) -> PartnerToolDef {
        PartnerToolDef {
            key: key.into(),
            description: "d".into(),
            url: "http://127.0.0.1:9/x".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            timeout_ms: 1000,
            retry: None,
        }
    }

    #[test]
    fn a_definition_is_checked_like_a_plan_and_names_each_problem() {
        let registry = ToolRegistry::builder().with_builtins().unwrap().build();
        let step = |tool: &str| -> plans::StepDef {
            serde_json::from_value(json!({"id": "s", "tool": tool})).unwrap()
        };
        let def = CapabilityDef {
            key: "acme.quotes".into(),
            name: "Quotes".into(),
            description: String::new(),
            plans: vec![PlanDef {
                key: "acme.quote".into(),
                intent: "acme.quote".into(),
                description: String::new(),
                priority: 0,
                patterns: vec!["quote".into()],
                steps: vec![step("partner.acme.rate")],
                max_concurrent: None,
            }],
            tools: vec![tool("partner.acme.rate")],
            limits: Limits::default(),
            rotate_secret: false,
        };
        assert!(
            check_capability(&def, &registry).is_ok(),
            "own partner tools count"
        );
        let mut bad = def.clone();
        bad.tools = vec![tool("acme.rate"), tool("partner.x"), tool("partner.x")];
        bad.tools[1].url = "ftp://x".into();
        bad.tools[2].retry = Some(plans::RetryPolicy {
            max_attempts: 0,
            initial_backoff_ms: 10,
            max_backoff_ms: 10,
        });
        bad.plans.push(bad.plans[0].clone());
        bad.limits.max_tasks_per_month = Some(0);
        let err = check_capability(&bad, &registry).unwrap_err().to_string();
        for needle in [
            "tool `acme.rate`: a partner tool's key is `partner.`",
            "tool `partner.x`: url must be an http(s) URL",
            "tool `partner.x`: declared twice",
            "tool `partner.x`: retry.max_attempts must be 1-20",
            "plan `acme.quote`: declared twice",
            "tool `partner.acme.rate` is not registered",
            "maxTasksPerMonth",
        ] {
            assert!(err.contains(needle), "{needle} in {err}");
        }
    }
}
