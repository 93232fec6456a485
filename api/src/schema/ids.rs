//! Opaque ids. A global id is base64url(`<Type>:<uuid>`); clients must treat
//! it as a string. A cursor is base64url of the row's UUID.

use async_graphql::ID;
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use brainstem_domain::Error;
use uuid::Uuid;

/// The type names that can appear in a global id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeType {
    Tenant,
    ApiKey,
    Task,
    Plan,
    Review,
    Connection,
    AuditEntry,
    Memory,
    KgEntity,
    KgRelation,
    Capability,
    CapabilitySubscription,
    Conversation,
    RetryJob,
    MemoryImportJob,
}

impl NodeType {
    fn as_str(self) -> &'static str {
        match self {
            NodeType::Tenant => "Tenant",
            NodeType::ApiKey => "ApiKey",
            NodeType::Task => "Task",
            NodeType::Plan => "Plan",
            NodeType::Review => "Review",
            NodeType::Connection => "Connection",
            NodeType::AuditEntry => "AuditEntry",
            NodeType::Memory => "Memory",
            NodeType::KgEntity => "KgEntity",
            NodeType::KgRelation => "KgRelation",
            NodeType::Capability => "Capability",
            NodeType::CapabilitySubscription => "CapabilitySubscription",
            NodeType::Conversation => "Conversation",
            NodeType::RetryJob => "RetryJob",
            NodeType::MemoryImportJob => "MemoryImportJob",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "Tenant" => Some(NodeType::Tenant),
            "ApiKey" => Some(NodeType::ApiKey),
            "Task" => Some(NodeType::Task),
            "Plan" => Some(NodeType::Plan),
            "Review" => Some(NodeType::Review),
            "Connection" => Some(NodeType::Connection),
            "AuditEntry" => Some(NodeType::AuditEntry),
            "Memory" => Some(NodeType::Memory),
            "KgEntity" => Some(NodeType::KgEntity),
            "KgRelation" => Some(NodeType::KgRelation),
            "Capability" => Some(NodeType::Capability),
            "CapabilitySubscription" => Some(NodeType::CapabilitySubscription),
            "Conversation" => Some(NodeType::Conversation),
            "RetryJob" => Some(NodeType::RetryJob),
            "MemoryImportJob" => Some(NodeType::MemoryImportJob),
            _ => None,
        }
    }
}

pub fn encode(ty: NodeType, id: Uuid) -> ID {
    ID(brainstem_domain::page::global_id(ty.as_str(), id))
}

/// Decode any global id.
pub fn decode(id: &ID) -> Result<(NodeType, Uuid), Error> {
    brainstem_domain::page::parse_global_id(id.as_str())
        .and_then(|(ty, uuid)| Some((NodeType::parse(&ty)?, uuid)))
        .ok_or_else(|| Error::validation(format!("`{}` is not a valid id", id.as_str())))
}

/// Decode a global id that must be of one type.
pub fn decode_as(id: &ID, expected: NodeType) -> Result<Uuid, Error> {
    match decode(id)? {
        (ty, uuid) if ty == expected => Ok(uuid),
        _ => Err(Error::validation(format!(
            "`{}` is not an id of a {}",
            id.as_str(),
            expected.as_str()
        ))),
    }
}

pub fn encode_cursor(id: Uuid) -> String {
    URL_SAFE_NO_PAD.encode(id.as_bytes())
}

pub fn decode_cursor(cursor: &str) -> Result<Uuid, Error> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| Uuid::from_slice(&bytes).ok())
        .ok_or_else(|| Error::validation(format!("`{cursor}` is not a valid cursor")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_round_trip_and_check_their_type() {
        let uuid = Uuid::now_v7();
        let id = encode(NodeType::ApiKey, uuid);
        assert_eq!(decode(&id).unwrap(), (NodeType::ApiKey, uuid));
        assert_eq!(decode_as(&id, NodeType::ApiKey).unwrap(), uuid);
        assert!(decode_as(&id, NodeType::Tenant).is_err());
        assert!(decode(&ID("garbage".into())).is_err());
        assert!(decode(&ID(URL_SAFE_NO_PAD.encode("Nope:1"))).is_err());
    }

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let uuid = Uuid::now_v7();
        assert_eq!(decode_cursor(&encode_cursor(uuid)).unwrap(), uuid);
        assert!(decode_cursor("!!").is_err());
    }
}
