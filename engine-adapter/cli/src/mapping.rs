//! `--server RESOURCE=SERVER_ID` and `--attr RESOURCE[.ATTR]=VALUE`: what a template's
//! infrastructure resources stand for, as the driver keeps it in the stack.

use std::collections::BTreeMap;

use flue_proto::{MappedResource, ServerId};
use serde_json::Value;

use super::CliError;

/// The mapping given on the command line; each flag's problem is named with it.
pub fn parse(
    servers: &[String],
    attrs: &[String],
) -> Result<BTreeMap<String, MappedResource>, CliError> {
    let mut out: BTreeMap<String, MappedResource> = BTreeMap::new();
    for pair in servers {
        let Some((resource, id)) = pair.split_once('=') else {
            return Err(CliError::Usage(format!(
                "--server expects RESOURCE=SERVER_ID, got {pair:?}"
            )));
        };
        let id = ServerId::new(id)
            .map_err(|e| CliError::Usage(format!("--server {resource}: server id {id:?} {e}")))?;
        let entry = out.entry(resource.to_owned()).or_default();
        if entry.server_id.replace(id).is_some() {
            return Err(CliError::Usage(format!(
                "--server {resource} is given twice"
            )));
        }
    }
    for pair in attrs {
        let Some((target, text)) = pair.split_once('=') else {
            return Err(CliError::Usage(format!(
                "--attr expects RESOURCE.ATTR=VALUE or RESOURCE=VALUE, got {pair:?}"
            )));
        };
        let (resource, attr) = match target.split_once('.') {
            Some((r, a)) => (r, Some(a)),
            None => (target, None),
        };
        if resource.is_empty() || attr.is_some_and(str::is_empty) {
            return Err(CliError::Usage(format!(
                "--attr expects RESOURCE.ATTR=VALUE or RESOURCE=VALUE, got {pair:?}"
            )));
        }
        let entry = out.entry(resource.to_owned()).or_default();
        let twice = match attr {
            Some(attr) => entry
                .attributes
                .insert(attr.to_owned(), value(target, text)?)
                .is_some(),
            None => entry.reference.replace(text.to_owned()).is_some(),
        };
        if twice {
            return Err(CliError::Usage(format!("--attr {target} is given twice")));
        }
    }
    Ok(out)
}

/// A value as text, or as JSON when it looks like a map or a list.
fn value(target: &str, text: &str) -> Result<Value, CliError> {
    if text.trim_start().starts_with(['{', '[']) {
        serde_json::from_str(text)
            .map_err(|e| CliError::Usage(format!("--attr {target}: not valid JSON: {e}")))
    } else {
        Ok(Value::String(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_and_attributes_gather_per_resource() {
        let m = parse(
            &["server_a=web1".into()],
            &[
                "server_a.first_address=10.0.0.5".into(),
                "server_a.networks={\"private\": [\"10.0.0.5\"]}".into(),
                "port=port-1234".into(),
            ],
        )
        .expect("parses");
        assert_eq!(
            m["server_a"].server_id.as_ref().map(|s| s.as_str()),
            Some("web1")
        );
        assert_eq!(m["server_a"].attributes["first_address"], "10.0.0.5");
        assert_eq!(
            m["server_a"].attributes["networks"]["private"][0],
            "10.0.0.5"
        );
        assert_eq!(m["port"].reference.as_deref(), Some("port-1234"));
    }

    #[test]
    fn a_bad_server_id_or_shape_names_the_flag() {
        let e = parse(&["server_a=web 1".into()], &[]).expect_err("bad id");
        assert!(e.to_string().contains("--server server_a"), "{e}");
        let e = parse(&["server_a".into()], &[]).expect_err("no =");
        assert!(e.to_string().contains("RESOURCE=SERVER_ID"), "{e}");
        let e = parse(&[], &["a.=1".into()]).expect_err("empty attr");
        assert!(e.to_string().contains("--attr"), "{e}");
        let e = parse(&[], &["a.b={nope".into()]).expect_err("bad json");
        assert!(e.to_string().contains("--attr a.b: not valid JSON"), "{e}");
    }
}
