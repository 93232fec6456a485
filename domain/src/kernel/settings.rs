//! Platform settings kept in the database.
//!
//! An embedded (SQLite) install with no configured signing secret or
//! connection encryption key generates them on first start and keeps them
//! here, so that `brainstem token` and the server agree without any setup.
//! Production deployments configure their keys instead.

use brainstem_entity::platform_setting;
use chrono::Utc;
use rand::RngCore;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseConnection, EntityTrait};

use crate::{Error, Result, kernel::crypto::EncryptionKey};

const DEV_JWT_SECRET: &str = "dev_jwt_secret";
const DEV_CONNECTION_KEY: &str = "dev_connection_encryption_key";

/// The generated HS256 secret of an embedded install, created on first use.
pub async fn dev_jwt_secret(db: &DatabaseConnection) -> Result<String> {
    get_or_create(db, DEV_JWT_SECRET, || {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        hex::encode(bytes)
    })
    .await
}

/// The generated connection encryption key (base64) of an embedded install,
/// created on first use.
pub async fn dev_connection_key(db: &DatabaseConnection) -> Result<String> {
    get_or_create(db, DEV_CONNECTION_KEY, EncryptionKey::generate_base64).await
}

async fn get_or_create(
    db: &DatabaseConnection,
    key: &str,
    generate: impl FnOnce() -> String,
) -> Result<String> {
    if let Some(row) = platform_setting::Entity::find_by_id(key.to_owned())
        .one(db)
        .await?
    {
        return Ok(row.value);
    }
    let value = generate();
    let inserted = platform_setting::ActiveModel {
        key: Set(key.to_owned()),
        value: Set(value.clone()),
        updated_at: Set(Utc::now()),
    }
    .insert(db)
    .await
    .map_err(Error::from);
    match inserted {
        Ok(_) => Ok(value),
        // Another process created it first: use theirs.
        Err(Error::Conflict(_)) => platform_setting::Entity::find_by_id(key.to_owned())
            .one(db)
            .await?
            .map(|row| row.value)
            .ok_or_else(|| Error::internal(format!("the generated setting {key} vanished"))),
        Err(err) => Err(err),
    }
}
