//! The OpenAPI schemas of the types whose serde form a derive cannot see: ids and action
//! names (validated strings) and event type names (written through `Display`).
//!
//! Everything else derives `utoipa::ToSchema` next to its serde derive, so the document the
//! gateway serves at `/openapi.json` follows the same attributes serde does.

use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::event::EventType;
use crate::ids::MAX_ID_LEN;
use crate::stack::Unit;

/// A subject token ([`crate::ids::validate`]): 1 to 64 of `[A-Za-z0-9_-]`.
pub fn token_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .min_length(Some(1))
        .max_length(Some(MAX_ID_LEN))
        .pattern(Some(format!("^[A-Za-z0-9_-]{{1,{MAX_ID_LEN}}}$")))
        .into()
}

impl PartialSchema for EventType {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .enum_values(Some(EventType::ALL.iter().map(ToString::to_string)))
            .into()
    }
}

impl ToSchema for EventType {}

/// `PutStack.changed_units`: unit keys to a unit, or to `null` for a unit that leaves.
pub fn changed_units() -> Schema {
    let unit_or_null = OneOfBuilder::new()
        .item(Ref::from_schema_name(Unit::name()))
        .item(ObjectBuilder::new().schema_type(SchemaType::Type(Type::Null)));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .additional_properties(Some(Schema::OneOf(unit_or_null.build())))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_pattern_matches_what_validate_accepts() {
        let RefOr::T(Schema::Object(schema)) = token_schema() else {
            panic!("an id is an inline object schema");
        };
        assert_eq!(schema.pattern.as_deref(), Some("^[A-Za-z0-9_-]{1,64}$"));
    }
}
