//! Platform settings kept in the database.
//!
//! An embedded (SQLite) install with no configured signing secret generates
//! one on first start and keeps it here, so that `brainstem token` and the
//! server agree without any setup. Production deployments configure their
//! secret or public key instead.

use brainstem_entity::platform_setting;
use chrono::Utc;
use rand::RngCore;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseConnection, EntityTrait};

use crate::{Error, Result};

const DEV_JWT_SECRET: &str = "dev_jwt_secret";

/// The generated HS256 secret of an embedded install, created on first use.
pub async fn dev_jwt_secret(db: &DatabaseConnection) -> Result<String> {
    if let Some(row) = platform_setting::Entity::find_by_id(DEV_JWT_SECRET.to_owned())
        .one(db)
        .await?
    {
        return Ok(row.value);
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = hex::encode(bytes);
    let inserted = platform_setting::ActiveModel {
        key: Set(DEV_JWT_SECRET.to_owned()),
        value: Set(secret.clone()),
        updated_at: Set(Utc::now()),
    }
    .insert(db)
    .await
    .map_err(Error::from);
    match inserted {
        Ok(_) => Ok(secret),
        // Another process created it first: use theirs.
        Err(Error::Conflict(_)) => platform_setting::Entity::find_by_id(DEV_JWT_SECRET.to_owned())
            .one(db)
            .await?
            .map(|row| row.value)
            .ok_or_else(|| Error::internal("the generated signing secret vanished")),
        Err(err) => Err(err),
    }
}
