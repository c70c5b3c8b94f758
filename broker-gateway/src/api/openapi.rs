//! `GET /openapi.json`: the API's OpenAPI 3.1 document, made from the code.
//!
//! Every route is registered through `utoipa_axum::routes!` ([`super::shared_routes`],
//! [`super::tenant_routes`]), which takes its path and methods from the handler's
//! `#[utoipa::path]`: a route cannot be served without being in the document, nor
//! documented under another path. Bodies are the `flue_proto` types' `ToSchema` derives,
//! which read the same serde attributes their (de)serialisation does.
//!
//! What every operation shares is added here rather than on each handler, from the same
//! code the requests go through: who may call it (`x-flue-roles`, from
//! [`crate::auth::roles::allowed`]) with the bearer scheme and its 401 / 403, the 400 of a
//! bad id or query, the refusals of the body guard, and the 503 of a broker away or a
//! request out of time.

use std::sync::LazyLock;

use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use flue_proto::ErrorBody;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder, Ref,
    RefOr, ResponseBuilder, Tag,
};
use utoipa::{PartialSchema, ToSchema};

use crate::auth::roles;

/// Where the document is served (no token needed: it holds no data).
pub const PATH: &str = "/openapi.json";

/// The name of the bearer scheme in `components.securitySchemes`.
const BEARER: &str = "bearer";

/// The document, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    serde_json::to_string_pretty(&document()).unwrap_or_else(|e| {
        // Only a non-string map key could fail here, and the document has none.
        tracing::error!(error = %e, "cannot write the OpenAPI document");
        "{}".to_owned()
    })
});

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    operation_id = "openapi",
    path = "/openapi.json",
    tag = "meta",
    summary = "This document (OpenAPI 3.1)",
    responses((status = 200, description = "The API's OpenAPI 3.1 document.", content_type = "application/json", body = Object))
)]
pub async fn serve() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}

/// The document as served (`flue-gateway openapi` prints it).
pub fn json() -> &'static str {
    DOCUMENT.as_str()
}

/// The whole document: every route of [`super::router`] and [`super::tenant_router`].
pub fn document() -> OpenApi {
    let (_, shared) = super::shared_routes().split_for_parts();
    let (_, tenant) = super::tenant_routes().split_for_parts();
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Flue gateway API")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Flue carries software configuration from an orchestration engine to \
                     servers over NATS JetStream. This is the gateway's HTTP API; the guide is \
                     docs/api.md.",
                ))
                .license(Some(LicenseBuilder::new().name("Apache-2.0").build())),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    BEARER,
                    SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
                )
                .schema(ErrorBody::name(), ErrorBody::schema())
                .build(),
        ))
        .build();
    doc.merge(shared);
    doc.merge(tenant);
    complete(&mut doc);
    doc
}

/// `(from operation, status, to operation, [(parameter, runtime expression)])`.
type LinkEntry = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The ids an answer holds, and the operations that take them: OpenAPI links, which
/// clients (and schemathesis' stateful runs) follow from a create to its reads and
/// removal. Each entry: the operation and status whose answer holds the id, the operation
/// it leads to, and that operation's parameters as runtime expressions.
const LINKS: &[LinkEntry] = &[
    (
        "create_config",
        "201",
        "get_config",
        &[("id", "$response.body#/id")],
    ),
    (
        "register_server",
        "201",
        "get_server",
        &[("id", "$response.body#/server/id")],
    ),
    (
        "register_server",
        "201",
        "list_server_deployments",
        &[("id", "$response.body#/server/id")],
    ),
    (
        "register_server",
        "201",
        "rotate_server_credentials",
        &[("id", "$response.body#/server/id")],
    ),
    (
        "register_server",
        "201",
        "deregister_server",
        &[("id", "$response.body#/server/id")],
    ),
    (
        "create_deployment",
        "202",
        "get_deployment",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_webhook",
        "201",
        "get_webhook",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_webhook",
        "201",
        "resume_webhook",
        &[("id", "$response.body#/id")],
    ),
    (
        "create_webhook",
        "201",
        "delete_webhook",
        &[("id", "$response.body#/id")],
    ),
    (
        "put_stack",
        "200",
        "get_stack",
        &[("id", "$response.body#/id")],
    ),
    (
        "put_stack",
        "200",
        "list_stack_units",
        &[("id", "$response.body#/id")],
    ),
    (
        "put_stack",
        "200",
        "export_stack",
        &[("id", "$response.body#/id")],
    ),
    (
        "put_stack",
        "200",
        "list_stack_operations",
        &[("id", "$response.body#/id")],
    ),
    (
        "put_stack",
        "200",
        "delete_stack",
        &[("id", "$response.body#/id")],
    ),
    (
        "submit_stack_operation",
        "202",
        "get_stack_operation",
        &[
            ("id", "$response.body#/stack"),
            ("op", "$response.body#/id"),
        ],
    ),
    (
        "create_token",
        "201",
        "revoke_token",
        &[("id", "$response.body#/id")],
    ),
];

/// Adds [`LINKS`] to the answers they start from.
fn link(doc: &mut OpenApi) {
    for (from, status, to, parameters) in LINKS {
        let operation = doc
            .paths
            .paths
            .values_mut()
            .flat_map(|item| {
                [
                    &mut item.get,
                    &mut item.put,
                    &mut item.post,
                    &mut item.delete,
                ]
            })
            .flatten()
            .find(|op| op.operation_id.as_deref() == Some(from));
        let Some(RefOr::T(response)) =
            operation.and_then(|op| op.responses.responses.get_mut(*status))
        else {
            // The unit tests name every entry, so this is a mistake in the table.
            tracing::error!(
                from,
                status,
                "an OpenAPI link starts from no documented answer"
            );
            continue;
        };
        let mut link = LinkBuilder::new().operation_id(*to);
        for (name, value) in *parameters {
            link = link.parameter(*name, *value);
        }
        response
            .links
            .insert((*to).to_owned(), RefOr::T(link.build()));
    }
}

/// Adds to every operation what it shares with the others (see the module docs).
fn complete(doc: &mut OpenApi) {
    link(doc);
    let mut tags = std::collections::BTreeSet::new();
    let mut ids = std::collections::HashSet::new();
    for (path, item) in doc.paths.paths.iter_mut() {
        let methods = [
            (Method::GET, &mut item.get),
            (Method::PUT, &mut item.put),
            (Method::POST, &mut item.post),
            (Method::DELETE, &mut item.delete),
        ];
        for (method, operation) in methods {
            let Some(operation) = operation.as_mut() else {
                continue;
            };
            tags.extend(operation.tags.iter().flatten().cloned());
            // One handler under two methods (a Heat signal is a PUT or a POST) has one
            // name: the second method's gets the method's name appended.
            if let Some(id) = operation.operation_id.as_mut()
                && !ids.insert(id.clone())
            {
                id.push('_');
                id.push_str(&method.as_str().to_lowercase());
            }
            shared_refusals(path, &method, operation);
        }
    }
    doc.tags = Some(tags.into_iter().map(Tag::new).collect());
}

fn shared_refusals(path: &str, method: &Method, operation: &mut Operation) {
    if let Some(description) = operation.description.take() {
        operation.description = Some(plain(&description));
    }
    let has_params = operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
    if has_params {
        refusal(
            operation,
            400,
            "An id in the path or a query parameter is invalid (the message names it).",
        );
    }
    if operation.request_body.is_some() {
        refusal(operation, 400, "The body is not JSON.");
        refusal(
            operation,
            408,
            "The body did not arrive within the body timeout.",
        );
        refusal(
            operation,
            413,
            "The body is larger than the gateway's `--max-body-bytes`.",
        );
        refusal(
            operation,
            415,
            "The body is not declared `Content-Type: application/json`.",
        );
        refusal(
            operation,
            422,
            "The body is not the expected shape (the message names the field).",
        );
    }
    let authenticated = path.starts_with("/v1/") || path == super::metrics::PATH;
    if authenticated {
        let concrete = concrete(path);
        let allowed: Vec<String> = roles::allowed(method, &concrete)
            .iter()
            .map(|r| r.to_string())
            .collect();
        operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        refusal(
            operation,
            401,
            "No token, or one that is malformed, badly signed, expired or revoked.",
        );
        refusal(operation, 403, "The token's role may not call this route.");
        let extensions = ExtensionsBuilder::new()
            .add("x-flue-roles", serde_json::json!(allowed))
            .build();
        match operation.extensions.as_mut() {
            Some(e) => e.merge(extensions),
            None => operation.extensions = Some(extensions),
        }
    } else {
        operation.security = Some(Vec::new());
    }
    if path.starts_with("/v1/") || path.starts_with("/heat/") {
        refusal(
            operation,
            503,
            "The broker is not reachable, did not complete the call, or the request took \
             longer than the request timeout: nothing is lost, retry (see `Retry-After`).",
        );
    }
}

/// Documents `status` as an [`ErrorBody`] answer, unless the operation names it already.
fn refusal(operation: &mut Operation, status: u16, description: &str) {
    let key = status.to_string();
    if operation.responses.responses.contains_key(&key) {
        return;
    }
    let response = ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(ErrorBody::name())))
                .build(),
        )
        .build();
    operation
        .responses
        .responses
        .insert(key, RefOr::T(response));
}

/// A path template with its parameters filled in, as [`roles::allowed`] reads paths.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "x" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// Rustdoc's intra-doc links (`` [`Type`] ``) as plain code spans.
fn plain(text: &str) -> String {
    text.replace("[`", "`").replace("`]", "`")
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn json() -> Value {
        serde_json::from_str(super::json()).expect("the document is JSON")
    }

    /// Every `$ref` in `value`.
    fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(v, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_document_is_openapi_3_1_and_every_reference_in_it_resolves() {
        let doc = json();
        assert!(
            doc["openapi"]
                .as_str()
                .is_some_and(|v| v.starts_with("3.1")),
            "{}",
            doc["openapi"]
        );
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(found.len() > 50, "only {} references", found.len());
        for r in found {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{r}"));
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{r} is not in the document"
            );
        }
    }

    #[test]
    fn the_webhook_signature_schemes_and_both_metrics_formats_are_documented() {
        let doc = json();
        let schemas = &doc["components"]["schemas"];
        let signature = schemas["WebhookSignature"].to_string();
        for scheme in ["\"standard\"", "\"flue-v1\""] {
            assert!(signature.contains(scheme), "{scheme} missing: {signature}");
        }
        for body in ["CreateWebhook", "Webhook"] {
            assert!(
                schemas[body]["properties"]["signature"].is_object(),
                "{body}: {}",
                schemas[body]
            );
        }
        let content = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        for media in [
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "text/plain; version=0.0.4; charset=utf-8",
        ] {
            assert!(content[media].is_object(), "{media} missing: {content}");
        }
    }

    #[test]
    fn every_api_operation_names_its_roles_and_its_refusals() {
        let doc = json();
        let paths = doc["paths"].as_object().expect("paths");
        let mut operations = 0;
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("a path item") {
                operations += 1;
                let responses = op["responses"].as_object().expect("responses");
                if path.starts_with("/v1/") || path == crate::api::metrics::PATH {
                    let roles = op["x-flue-roles"].as_array().expect("x-flue-roles");
                    assert!(!roles.is_empty(), "{method} {path} names no role");
                    for status in ["401", "403"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path} lacks {status}"
                        );
                    }
                } else {
                    assert!(op.get("x-flue-roles").is_none(), "{method} {path}");
                }
                if op.get("requestBody").is_some() {
                    for status in ["400", "413", "415", "422"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path} lacks {status}"
                        );
                    }
                }
            }
        }
        assert!(operations >= 45, "only {operations} operations");
        let mut ids: Vec<&str> = paths
            .values()
            .flat_map(|item| item.as_object().expect("a path item").values())
            .map(|op| {
                op["operationId"]
                    .as_str()
                    .expect("every operation has an id")
            })
            .collect();
        ids.sort_unstable();
        let count = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), count, "operation ids are unique");
        let timeout =
            &doc["components"]["schemas"]["CreateDeployment"]["properties"]["timeout_secs"];
        assert_eq!(
            timeout["maximum"],
            crate::config::MAX_TIMEOUT_SECS,
            "{timeout}"
        );
        let links: Vec<(&str, &Value)> = paths
            .values()
            .flat_map(|item| item.as_object().expect("a path item").values())
            .flat_map(|op| op["responses"].as_object().expect("responses").values())
            .filter_map(|r| r.get("links").and_then(Value::as_object))
            .flat_map(|links| links.iter().map(|(name, link)| (name.as_str(), link)))
            .collect();
        assert_eq!(
            links.len(),
            super::LINKS.len(),
            "every link is in the document"
        );
        for (name, link) in links {
            let target = link["operationId"]
                .as_str()
                .expect("a link names its operation");
            assert!(
                ids.binary_search(&target).is_ok(),
                "link {name}: no operation {target}"
            );
        }
        let roles = &doc["paths"]["/v1/configs"]["post"]["x-flue-roles"];
        assert_eq!(roles, &serde_json::json!(["engine"]));
    }
}
