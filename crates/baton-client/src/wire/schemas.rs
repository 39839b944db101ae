//! Types for the OpenAPI document only: what the server checks of argv, environment,
//! labels and queue names, so generated clients and fuzzers know it too.

/// A string matching a pattern, for the OpenAPI document only: what the server checks
/// of labels and queue names, so generated clients and fuzzers know it too.
fn pattern_schema(pattern: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .into()
}

/// A task's argv: at least one element, the first naming a program (the server refuses
/// an empty one with a 422). Said as a plain array of strings: the first element's rule
/// as `prefixItems` made both well-known TypeScript generators type the field as a
/// one-element tuple, which refused any real command.
pub struct Argv;

impl utoipa::PartialSchema for Argv {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
        ArrayBuilder::new()
            .items(ObjectBuilder::new().schema_type(Type::String))
            .min_items(Some(1))
            .description(Some(
                "The program (a non-empty first element) and its arguments.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Argv {}

/// Raw bytes, as a body of `application/octet-stream`: a task's output.
pub struct RawBytes;

impl utoipa::PartialSchema for RawBytes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl utoipa::ToSchema for RawBytes {}

/// Environment variables: POSIX-portable names, string values.
pub struct EnvMap;

impl utoipa::PartialSchema for EnvMap {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")),
            ))
            .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
            .max_properties(Some(128))
            .into()
    }
}

impl utoipa::ToSchema for EnvMap {}

/// A runner label: 1-64 characters of `[a-zA-Z0-9._:=/-]`.
pub struct LabelName;

impl utoipa::PartialSchema for LabelName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        pattern_schema(r"^[a-zA-Z0-9][a-zA-Z0-9._:=/-]{0,63}$")
    }
}

impl utoipa::ToSchema for LabelName {}

/// A queue name: `[a-z0-9][a-z0-9._-]{0,63}`.
pub struct QueueName;

impl utoipa::PartialSchema for QueueName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        pattern_schema(r"^[a-z0-9][a-z0-9._-]{0,63}$")
    }
}

impl utoipa::ToSchema for QueueName {}
