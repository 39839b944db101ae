//! The ids that travel beside a task's id — one lease of a task, a runner — each a type of
//! its own. They are UUIDs on the wire, in the tables and in Redis, as a task's id is; as
//! types, a lease id cannot be passed where a task's or a runner's is asked for, and a
//! `(task, lease)` or `(runner, lease)` pair cannot be passed back to front. (A task's id
//! stays a plain `Uuid`, as do a boot's and a request's.)

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// One id type over a UUID: the same traits for each, so they cannot drift apart.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $described:literal) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
        pub struct $name(Uuid);

        impl $name {
            /// A new random id: a lease's (the server draws them), or one for a test.
            pub fn random() -> Self {
                Self(Uuid::new_v4())
            }

            /// The UUID it is.
            pub fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::from_str(text).map(Self)
            }
        }

        // Described as the UUID string it is on the wire, under the type's own name (a
        // component of the document), so a generated client names the id too.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
                    .description(Some($described))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {}
    };
}

uuid_id! {
    /// One lease of a task: a runner's hold on one attempt. A start, log chunk or result
    /// under a lease that is no longer the task's current one is refused as stale.
    LeaseId, "One lease of a task: a runner's hold on one attempt."
}

uuid_id! {
    /// A registered runner's id.
    RunnerId, "A registered runner's id."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_its_uuid_on_the_wire_and_in_text() {
        let uuid = Uuid::new_v4();
        let lease = LeaseId::from(uuid);
        assert_eq!(
            serde_json::to_string(&lease).unwrap(),
            serde_json::to_string(&uuid).unwrap()
        );
        assert_eq!(
            serde_json::from_str::<LeaseId>(&format!("\"{uuid}\"")).unwrap(),
            lease
        );
        assert_eq!(lease.to_string().parse::<LeaseId>().unwrap(), lease);
        assert_eq!(Uuid::from(lease), uuid);
    }
}
