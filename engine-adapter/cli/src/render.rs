//! How the CLI shows things: progress lines, results, tables, output values, errors.

use std::error::Error;
use std::fmt::Write as _;

use flue_proto::{Deployment, Registration, Server, Tenant};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// `deployment <id> on <server>: <STATUS>`, one per status change.
pub(crate) fn progress_line(d: &Deployment) -> String {
    format!("deployment {} on {}: {}", d.id, d.server_id, d.status)
}

/// The indented block printed under the final progress line.
pub(crate) fn result_block(d: &Deployment) -> String {
    let mut out = String::new();
    if let Some(reason) = &d.status_reason {
        push_line(&mut out, &format!("  reason: {reason}"));
    }
    if let Some(code) = d.deploy_status_code {
        push_line(&mut out, &format!("  status code: {code}"));
    }
    for (name, value) in &d.outputs {
        push_line(
            &mut out,
            &format!("  output {name} = {}", output_value(value)),
        );
    }
    for (label, text) in [("stdout", &d.deploy_stdout), ("stderr", &d.deploy_stderr)] {
        if text.trim().is_empty() {
            continue;
        }
        push_line(&mut out, &format!("  {label}:"));
        for line in text.trim_end().lines() {
            push_line(&mut out, &format!("    {line}"));
        }
    }
    out
}

/// An output value for a terminal: a string as-is (no quotes), anything else as JSON.
pub(crate) fn output_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Pretty JSON with a trailing newline.
pub(crate) fn pretty_json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value)
        .expect("the API types serialise to JSON: their maps have string keys");
    text.push('\n');
    text
}

/// The agent's environment, one `NAME=value` line each, for an env file.
pub(crate) fn agent_env(registration: &Registration) -> String {
    let Some(agent) = &registration.agent else {
        return String::new();
    };
    format!(
        "FLUE_NATS_URL={}\nFLUE_TENANT={}\nFLUE_SERVER_ID={}\n",
        agent.nats_url, agent.tenant, agent.server_id
    )
}

/// `id action status created_at` table of a server's deployments.
pub(crate) fn deployments_table(deployments: &[Deployment]) -> String {
    let rows: Vec<[String; 4]> = deployments
        .iter()
        .map(|d| {
            [
                d.id.to_string(),
                d.action.to_string(),
                d.status.to_string(),
                timestamp(d.created_at),
            ]
        })
        .collect();
    table(["ID", "ACTION", "STATUS", "CREATED_AT"], &rows)
}

/// `id name presence agent-version created_at` table of servers.
pub(crate) fn servers_table(servers: &[Server]) -> String {
    let rows: Vec<[String; 5]> = servers
        .iter()
        .map(|s| {
            let presence = s.presence.as_ref().map_or("unknown".to_owned(), |p| {
                serde_json::to_value(p.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            });
            let version = s
                .presence
                .as_ref()
                .and_then(|p| p.agent_version.clone())
                .unwrap_or_else(|| "-".to_owned());
            [
                s.id.to_string(),
                s.name.clone(),
                presence,
                version,
                timestamp(s.created_at),
            ]
        })
        .collect();
    table(["ID", "NAME", "PRESENCE", "AGENT", "CREATED_AT"], &rows)
}

pub(crate) fn tenants_table(tenants: &[Tenant]) -> String {
    let rows: Vec<[String; 3]> = tenants
        .iter()
        .map(|t| [t.id.to_string(), t.name.clone(), timestamp(t.created_at)])
        .collect();
    table(["ID", "NAME", "CREATED_AT"], &rows)
}

pub(crate) fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        push_line(&mut out, line.trim_end());
    }
    out
}

/// `error: <message>` for stderr. When the error has underlying causes, the deepest
/// one is appended: it is the one that says what actually happened (e.g.
/// "connection refused"), while the layers between repeat the URL.
pub fn error_message(err: &(dyn Error + 'static)) -> String {
    let mut root = err.source();
    while let Some(next) = root.and_then(Error::source) {
        root = Some(next);
    }
    let text = match root {
        Some(cause) => format!("error: {err}: {cause}"),
        None => format!("error: {err}"),
    };
    match auth_status(err) {
        Some(401) => format!(
            "{text}\n401: set {} (or --token) to a token from `flue-gateway token` or POST /v1/tokens",
            flue_proto::auth::TOKEN_ENV
        ),
        Some(403) => {
            format!("{text}\n403: the token's role may not do this; use a token of a role that may")
        }
        _ if names_the_address(err) => format!(
            "{text}\nthe gateway's address is --gateway or FLUE_GATEWAY_URL (default {})",
            crate::args::DEFAULT_GATEWAY
        ),
        _ => text,
    }
}

/// Whether the gateway's address is what failed (nothing answered there, or it is no URL).
fn names_the_address(err: &(dyn Error + 'static)) -> bool {
    use flue_client::ClientError;
    let mut next = Some(err);
    while let Some(e) = next {
        let client =
            e.downcast_ref::<ClientError>()
                .or_else(|| match e.downcast_ref::<crate::CliError>() {
                    Some(crate::CliError::Client(c)) => Some(c),
                    _ => None,
                });
        if matches!(
            client,
            Some(ClientError::Unreachable { .. } | ClientError::InvalidUrl { .. })
        ) {
            return true;
        }
        next = e.source();
    }
    false
}

/// The status of a 401 or 403 answer somewhere in the error's chain.
fn auth_status(err: &(dyn Error + 'static)) -> Option<u16> {
    let mut next = Some(err);
    while let Some(e) = next {
        let client = e
            .downcast_ref::<flue_client::ClientError>()
            .or_else(|| match e.downcast_ref::<crate::CliError>() {
                Some(crate::CliError::Client(c)) => Some(c),
                _ => None,
            });
        if let Some(status) = client.and_then(flue_client::ClientError::status)
            && (status == 401 || status == 403)
        {
            return Some(status);
        }
        next = e.source();
    }
    None
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CliError;
    use flue_client::ClientError;
    use serde_json::json;

    fn deployment() -> Deployment {
        serde_json::from_value(json!({
            "id": "d1", "tenant": "default", "server_id": "db", "config_id": "db",
            "group": "script", "name": "d1", "action": "CREATE", "status": "COMPLETE",
            "outputs": {"address": "127.0.0.1:5432", "n": 3, "list": ["a"]},
            "deploy_stdout": "line one\nline two\n", "deploy_stderr": "",
            "deploy_status_code": 0, "timeout_secs": 60,
            "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
            "expires_at": "2025-01-01T00:01:00Z"
        }))
        .expect("deployment")
    }

    #[test]
    fn output_values_are_raw_strings_or_json() {
        assert_eq!(output_value(&json!("a b")), "a b");
        assert_eq!(output_value(&json!(5432)), "5432");
        assert_eq!(output_value(&json!({"k": [1, "x"]})), r#"{"k":[1,"x"]}"#);
        assert_eq!(output_value(&json!(null)), "null");
    }

    #[test]
    fn results_show_code_outputs_and_indented_streams() {
        let d = deployment();
        assert_eq!(progress_line(&d), "deployment d1 on db: COMPLETE");
        assert_eq!(
            result_block(&d),
            "  status code: 0\n  output address = 127.0.0.1:5432\n  output list = [\"a\"]\n  \
             output n = 3\n  stdout:\n    line one\n    line two\n"
        );
    }

    #[test]
    fn deployment_tables_align_columns() {
        let table = deployments_table(&[deployment()]);
        assert_eq!(
            table,
            "ID  ACTION  STATUS    CREATED_AT\nd1  CREATE  COMPLETE  2025-01-01T00:00:00Z\n"
        );
    }

    #[test]
    fn api_errors_show_status_and_code() {
        let err = CliError::Client(ClientError::Api {
            status: 404,
            code: "not_found".into(),
            message: "config \"c9\" not found".into(),
        });
        assert_eq!(
            error_message(&err),
            "error: gateway answered 404 not_found: config \"c9\" not found"
        );
    }

    #[test]
    fn errors_with_causes_end_with_the_root_cause() {
        let source = serde_json::from_str::<Value>("{").expect_err("bad json");
        let err = CliError::Spec {
            path: "s.json".into(),
            source,
        };
        assert_eq!(
            error_message(&err),
            "error: s.json: not a valid config spec: EOF while parsing an object at line 1 column 1"
        );
        let unknown = CliError::UnknownOutput {
            id: flue_proto::DeploymentId::new("d1").expect("id"),
            name: "url".into(),
            available: vec!["address".into(), "password".into()],
        };
        assert_eq!(
            error_message(&unknown),
            "error: deployment d1 has no output \"url\" (available: address, password)"
        );
    }
}
