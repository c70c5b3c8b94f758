//! A signal from `heat-config-notify` turned into the result an agent would report,
//! judged as Heat's own `SoftwareDeployment` judges a signal: a status code other than
//! `0` fails the deployment, as does any declared `error_output` present in it; only
//! declared outputs are kept.

use std::collections::BTreeMap;

use flue_proto::poll::SignalBody;
use flue_proto::{Config, DeploymentResult, DeploymentStatus};
use serde_json::Value;
use time::OffsetDateTime;

/// The result `body` reports for a deployment of `config`, finished `now`.
///
/// Hidden outputs are still in the clear here: the caller seals them to the gateway
/// before anything stores them.
pub fn result(body: SignalBody, config: &Config, now: OffsetDateTime) -> DeploymentResult {
    let mut reasons = Vec::new();
    let code = body.deploy_status_code.as_ref().and_then(status_code);
    // Heat: `if status_code and str(status_code) != '0'`: absent, 0, "" and false pass.
    let failed_code = match &body.deploy_status_code {
        None | Some(Value::Null) | Some(Value::Bool(false)) => None,
        Some(Value::String(s)) if s.is_empty() || s == "0" => None,
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => None,
        Some(other) => Some(text(other)),
    };
    if let Some(code) = &failed_code {
        reasons.push(format!(
            "deploy_status_code : Deployment exited with non-zero status code: {code}"
        ));
    }
    let mut outputs = BTreeMap::new();
    let mut given = body.outputs;
    for decl in &config.outputs {
        if let Some(value) = given.remove(&decl.name) {
            if decl.error_output {
                reasons.push(format!("{} : {}", decl.name, text(&value)));
            }
            outputs.insert(decl.name.clone(), value);
        }
    }
    let status = if reasons.is_empty() {
        DeploymentStatus::Complete
    } else {
        DeploymentStatus::Failed
    };
    DeploymentResult {
        status,
        status_reason: (!reasons.is_empty()).then(|| reasons.join(", ")),
        outputs,
        deploy_stdout: body.deploy_stdout.as_ref().map(text).unwrap_or_default(),
        deploy_stderr: body.deploy_stderr.as_ref().map(text).unwrap_or_default(),
        deploy_status_code: code,
        started_at: None,
        finished_at: now,
    }
}

/// A status code as a number, when it is one (`2` or `"2"`).
fn status_code(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A value as Heat would quote it: a string as it is, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use flue_proto::{ConfigSpec, OutputDecl};
    use serde_json::json;

    use super::*;

    fn config(outputs: &[(&str, bool)]) -> Config {
        let spec: ConfigSpec =
            serde_json::from_value(json!({"group": "script", "config": ""})).expect("spec");
        let mut config = spec.into_config("c1".parse().expect("id"), OffsetDateTime::UNIX_EPOCH);
        config.outputs = outputs
            .iter()
            .map(|(name, error_output)| {
                serde_json::from_value::<OutputDecl>(
                    json!({"name": name, "error_output": error_output}),
                )
                .expect("output")
            })
            .collect();
        config
    }

    fn body(value: Value) -> SignalBody {
        serde_json::from_value(value).expect("body")
    }

    #[test]
    fn a_zero_or_absent_status_code_completes_with_only_the_declared_outputs() {
        let config = config(&[("result", false)]);
        for code in [json!(0), json!("0"), json!(""), Value::Null] {
            let r = result(
                body(
                    json!({"deploy_stdout": "out", "deploy_status_code": code, "result": "x", "other": 1}),
                ),
                &config,
                OffsetDateTime::UNIX_EPOCH,
            );
            assert_eq!(r.status, DeploymentStatus::Complete, "{code}");
            assert_eq!(r.outputs.len(), 1);
            assert_eq!(r.deploy_stdout, "out");
        }
        let r = result(SignalBody::default(), &config, OffsetDateTime::UNIX_EPOCH);
        assert_eq!(r.status, DeploymentStatus::Complete);
    }

    #[test]
    fn a_nonzero_status_code_or_a_present_error_output_fails_it_saying_why() {
        let config = config(&[("err", true)]);
        let r = result(
            body(json!({"deploy_status_code": "3"})),
            &config,
            OffsetDateTime::UNIX_EPOCH,
        );
        assert_eq!(r.status, DeploymentStatus::Failed);
        assert_eq!(r.deploy_status_code, Some(3));
        assert!(
            r.status_reason
                .as_deref()
                .unwrap_or("")
                .contains("non-zero status code: 3")
        );
        let r = result(
            body(json!({"deploy_status_code": 0, "err": ""})),
            &config,
            OffsetDateTime::UNIX_EPOCH,
        );
        assert_eq!(
            r.status,
            DeploymentStatus::Failed,
            "present even when empty"
        );
        assert!(
            r.status_reason
                .as_deref()
                .unwrap_or("")
                .starts_with("err : ")
        );
    }
}
