//! Row identifiers. Each id is a UUID v7 (time-ordered, so indexes stay
//! append-mostly) wrapped in its own type so that a tenant id can never be
//! passed where an API key id is expected.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl From<Uuid> for $name {
            fn from(value: Uuid) -> Self {
                Self(value)
            }
        }

        impl From<$name> for Uuid {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A tenant: the unit of isolation.
    TenantId
);
id_type!(
    /// A partner API key of one tenant.
    ApiKeyId
);
id_type!(
    /// A row of the append-only audit log.
    AuditId
);
id_type!(
    /// A task.
    TaskId
);
id_type!(
    /// One published version of a plan.
    PlanId
);
id_type!(
    /// A tenant's connection to an external system.
    ConnectionId
);
id_type!(
    /// A memory: one fact a tenant keeps.
    MemoryId
);
id_type!(
    /// A knowledge-graph entity of one tenant.
    EntityId
);
id_type!(
    /// A knowledge-graph relation between two entities of one tenant.
    RelationId
);
id_type!(
    /// A capability of the platform's catalogue.
    CapabilityId
);
id_type!(
    /// A tenant's subscription to a capability.
    SubscriptionId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_time_ordered_and_round_trip_through_text() {
        let a = TenantId::new();
        let b = TenantId::new();
        assert!(a < b, "v7 ids sort by creation time");
        let parsed: TenantId = a.to_string().parse().unwrap();
        assert_eq!(parsed, a);
        assert!("not-a-uuid".parse::<TenantId>().is_err());
    }
}
id_type!(
    /// A conversation: a tenant's thread of tasks.
    ConversationId
);
