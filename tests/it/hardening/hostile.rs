//! Generators of hostile HTTP requests for the gateway: random methods, paths, ids,
//! query strings, content types and bodies (random JSON, deep nesting, huge strings
//! within the body limit, wrong types, unicode, NUL, raw bytes).

use std::fmt;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Ids the generated bodies and paths share, so that a later request reads what an
/// earlier one wrote (valid ids, never those of the fixture's own server and config).
pub const POOL: [&str; 3] = ["p-1", "p-2", "p-3"];

/// The fixture's server, which has a real agent.
pub const SERVER: &str = "s1";

/// Largest generated body; the gateway's limit is 1 MiB (its default).
const MAX_HUGE: usize = 1_040_000;

/// One request as sent over the socket.
#[derive(Clone)]
pub struct HostileRequest {
    /// Any token, not only the methods the API knows.
    pub method: String,
    /// Path and query, percent-encoded as a client must send them.
    pub target: String,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// The body, any bytes.
    pub body: Vec<u8>,
}

impl HostileRequest {
    /// A plain `GET` of `target`.
    pub fn get(target: &str) -> Self {
        Self {
            method: "GET".to_owned(),
            target: target.to_owned(),
            content_type: None,
            body: Vec::new(),
        }
    }
}

impl fmt::Debug for HostileRequest {
    // A failing case prints; a megabyte body must not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let preview = String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned();
        f.debug_struct("HostileRequest")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("content_type", &self.content_type)
            .field("body_len", &self.body.len())
            .field("body_start", &preview)
            .finish()
    }
}

/// A request, then a second one that uses what it may have written.
pub fn case() -> impl Strategy<Value = (HostileRequest, HostileRequest)> {
    prop_oneof![
        6 => (request(), read_back().prop_map(|target| HostileRequest::get(&target))),
        1 => stored_config(),
    ]
}

/// A config that may be accepted but is hard to keep or to send: its body nested just
/// under serde_json's depth limit (then read back), or a string just under the body
/// limit (then deployed to [`SERVER`], which has a real agent). Each gets a fresh id,
/// since configs are immutable.
fn stored_config() -> impl Strategy<Value = (HostileRequest, HostileRequest)> {
    let deep = ("[a-z0-9]{16}", 100usize..=127).prop_map(|(id, n)| {
        let id = format!("deep-{id}");
        let config = format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let read = HostileRequest::get(&format!("/v1/configs/{id}"));
        (create_config(&id, &config), read)
    });
    let big = ("[a-z0-9]{16}", 500_000usize..MAX_HUGE).prop_map(|(id, n)| {
        let id = format!("big-{id}");
        let config = format!("\"#{}\"", "x".repeat(n));
        let deploy = HostileRequest {
            method: "POST".to_owned(),
            target: "/v1/deployments".to_owned(),
            content_type: Some("application/json".to_owned()),
            body: json!({"config_id": id, "server_id": SERVER})
                .to_string()
                .into_bytes(),
        };
        (create_config(&id, &config), deploy)
    });
    prop_oneof![deep, big]
}

/// `POST /v1/configs` of a `script` config whose body is the JSON text `config`.
fn create_config(id: &str, config: &str) -> HostileRequest {
    HostileRequest {
        method: "POST".to_owned(),
        target: "/v1/configs".to_owned(),
        content_type: Some("application/json".to_owned()),
        body: format!(r#"{{"id":"{id}","group":"script","config":{config}}}"#).into_bytes(),
    }
}

fn request() -> impl Strategy<Value = HostileRequest> {
    (method(), path(), query(), content_type(), body()).prop_map(
        |(method, path, query, content_type, body)| HostileRequest {
            method,
            target: format!("{path}{query}"),
            content_type,
            body,
        },
    )
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["GET", "POST", "PUT", "DELETE"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["PATCH", "HEAD", "OPTIONS", "TRACE", "FLUE", "get"])
            .prop_map(str::to_owned),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let templates = vec![
        "/v1/configs",
        "/v1/configs/{id}",
        "/v1/servers",
        "/v1/servers/{id}",
        "/v1/servers/{id}/deployments",
        "/v1/deployments",
        "/v1/deployments/{id}",
        "/v1/stacks",
        "/v1/stacks/{id}",
        "/v1/webhooks",
        "/v1/webhooks/{id}",
        "/v1/webhooks/{id}/resume",
        "/v1/events",
        "/v1/{id}",
        "/{id}",
        "/assets/{id}",
        "//v1//configs/{id}/",
    ];
    (prop::sample::select(templates), id()).prop_map(|(t, id)| t.replace("{id}", &encode(&id)))
}

/// A valid id of the pool, or anything an id must not be.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(POOL.to_vec()).prop_map(str::to_owned),
        3 => hostile_text(),
    ]
}

fn query() -> impl Strategy<Value = String> {
    let keys = vec![
        "wait_secs",
        "after_status",
        "server",
        "stack",
        "deployment",
        "limit",
        "expected_revision",
        "type",
        "after",
        "since",
        "from",
        "follow",
    ];
    let key = prop_oneof![
        4 => prop::sample::select(keys).prop_map(str::to_owned),
        1 => hostile_text(),
    ];
    let value = prop_oneof![
        // A long poll that waits: short enough to stay within the answer bound.
        1 => prop::sample::select(vec!["0", "1", "2", "61", "COMPLETE", "IN_PROGRESS", "start", "false", "2025-01-31T12:00:00Z"])
            .prop_map(str::to_owned),
        3 => hostile_text(),
    ];
    prop_oneof![
        1 => Just(String::new()),
        3 => prop::collection::vec((key, value), 1..4).prop_map(|pairs| {
            let pairs: Vec<String> =
                pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
            format!("?{}", pairs.join("&"))
        }),
        // Not even key=value pairs: malformed escapes, bare separators.
        1 => prop::sample::select(vec!["?%", "?%zz=1", "?&&=&", "?=", "?a=%ff%fe", "?wait_secs=%00"])
            .prop_map(str::to_owned),
    ]
}

fn content_type() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.8,
        prop::sample::select(vec![
            "application/json",
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
            "application/vnd.api+json",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json; charset=latin1",
            "*/*",
            "json",
            "",
        ])
        .prop_map(str::to_owned),
    )
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        3 => json_value().prop_map(|v| v.to_string().into_bytes()),
        4 => shaped_body().prop_map(|v| v.to_string().into_bytes()),
        1 => deep_nesting(),
        1 => huge_string().prop_map(|s| json!({"id": "p-1", "group": "script", "config": s}).to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

/// Bodies shaped like the API's (configs, deployments, servers, stacks, webhooks) with
/// hostile values where the fields are.
fn shaped_body() -> impl Strategy<Value = Value> {
    let decl = (hostile_text(), json_value(), any::<bool>()).prop_map(
        |(name, default, hidden)| json!({"name": name, "default": default, "hidden": hidden}),
    );
    let config = (id(), prop::sample::select(vec!["script", "Heat::Ungrouped", "../x"]), json_value(), prop::collection::vec(decl, 0..3), json_value())
        .prop_map(|(id, group, config, inputs, options)| {
            json!({"id": id, "group": group, "config": config, "inputs": inputs, "outputs": inputs, "options": options})
        });
    let deployment = (id(), id(), id(), hostile_text(), json_value(), json_value())
        .prop_map(|(id, config, server, action, values, timeout)| {
            json!({"id": id, "config_id": config, "server_id": server, "action": action, "input_values": values, "timeout_secs": timeout})
        });
    let server = (id(), hostile_text()).prop_map(|(id, name)| json!({"id": id, "name": name}));
    let stack = (json_value(), json_value(), json_value()).prop_map(
        |(rev, status, state)| json!({"expected_revision": rev, "status": status, "state": state}),
    );
    // Only loopback targets: a subscription that gets created delivers nowhere else.
    let webhook = (
        prop::sample::select(vec![
            "http://127.0.0.1:9/hook",
            "ftp://127.0.0.1/",
            "http://u:p@127.0.0.1/",
        ]),
        hostile_text(),
        json_value(),
    )
        .prop_map(|(url, secret, filter)| json!({"url": url, "secret": secret, "filter": filter}));
    prop_oneof![config, deployment, server, stack, webhook]
}

/// `[[[…]]]` or a config whose body nests, around and past serde_json's depth limit (128).
fn deep_nesting() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (1usize..200_000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n)).into_bytes()),
        (90usize..140).prop_map(|n| {
            let nested = format!("{}1{}", "[".repeat(n), "]".repeat(n));
            format!(r#"{{"id":"p-2","group":"script","config":{nested}}}"#).into_bytes()
        }),
    ]
}

/// One character repeated up to just under the body limit.
fn huge_string() -> impl Strategy<Value = String> {
    (
        100_000usize..MAX_HUGE / 4,
        prop::sample::select(vec!['x', '\0', 'é', '💥', '"', '\\']),
    )
        .prop_map(|(n, c)| c.to_string().repeat(n))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        hostile_text().prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Field names of the API's bodies, or anything.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "id", "name", "group", "config", "inputs", "outputs", "options", "hooks", "actions",
            "substitute_inputs", "config_id", "server_id", "action", "input_values",
            "inputs_from", "input_refs", "skip_if_unchanged_from", "timeout_secs", "stack_id",
            "status", "state", "expected_revision", "type", "default", "hidden", "value",
        ])
        .prop_map(str::to_owned),
        1 => hostile_text(),
    ]
}

/// Text an id, a name or a query value must survive: subject metacharacters,
/// whitespace, NUL and other controls, unicode, too long, numbers out of range.
pub fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "", ".", "..", "*", ">", "a.b", "a*", "a>b", "a b", " ", "\t", "\n", "\0", "a\0b",
            "é", "💥", "\u{202e}rtl", "\u{feff}", "%", "%00", "../etc/passwd", "-1", "0",
            "18446744073709551616", "1e309", "NaN", "null", "true", "CREATE", "<hidden>",
            "flue.default.req.>",
        ])
        .prop_map(str::to_owned),
        2 => prop::collection::vec(any::<char>(), 0..24).prop_map(|c| c.into_iter().collect()),
        1 => "[A-Za-z0-9_-]{65,300}",
    ]
}

/// What a later request reads: the pool's records and the listings.
fn read_back() -> impl Strategy<Value = String> {
    let one = prop::sample::select(vec!["configs", "servers", "deployments", "stacks"]);
    prop_oneof![
        (one, prop::sample::select(POOL.to_vec())).prop_map(|(k, id)| format!("/v1/{k}/{id}")),
        prop::sample::select(vec![
            "/v1/servers",
            "/v1/deployments",
            "/v1/stacks",
            "/v1/webhooks",
            "/v1/servers/p-1/deployments",
            "/v1/deployments?stack=p-1&limit=1000",
        ])
        .prop_map(str::to_owned),
    ]
}

/// Percent-encodes everything but `[A-Za-z0-9_-]`, so that the URL carries exactly these
/// bytes (a client could not send most of them raw).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
