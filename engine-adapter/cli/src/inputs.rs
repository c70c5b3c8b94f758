//! Turning command-line flags into request bodies: config specs and input values.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use flue_proto::config::is_input_name;
use flue_proto::{ConfigSpec, InputDecl, OutputDecl};
use serde_json::Value;

use super::CliError;
use super::args::CreateConfigArgs;

/// Builds the spec for `flue config create`, reading files with `read`.
///
/// Either `--spec FILE` alone, or `--group` with exactly one of `--config-file` and
/// `--config` plus optional declarations.
pub(crate) fn config_spec(
    args: &CreateConfigArgs,
    read: impl Fn(&Path) -> io::Result<String>,
) -> Result<ConfigSpec, CliError> {
    let read_file = |path: &Path| {
        read(path).map_err(|source| CliError::Read {
            path: path.to_owned(),
            source,
        })
    };
    if let Some(path) = &args.spec {
        if has_spec_flags(args) {
            return Err(usage(
                "--spec FILE cannot be combined with --group, --config-file, --config, --id, \
                 --name, --input, --hidden-input, --output, --error-output or --options",
            ));
        }
        let text = read_file(path)?;
        return serde_json::from_str(&text).map_err(|source| CliError::Spec {
            path: path.to_owned(),
            source,
        });
    }
    let Some(group) = &args.group else {
        return Err(usage(
            "give either --spec FILE, or --group GROUP with --config-file PATH or --config TEXT",
        ));
    };
    let body = match (&args.config_file, &args.config) {
        (Some(_), Some(_)) => {
            return Err(usage(
                "--config-file and --config cannot be used together; give one of them",
            ));
        }
        (None, None) => {
            return Err(usage(
                "--group needs a config body: give --config-file PATH or --config TEXT",
            ));
        }
        (Some(path), None) => read_file(path)?,
        (None, Some(text)) => text.clone(),
    };
    let options = match &args.options {
        None => Value::Object(serde_json::Map::new()),
        Some(text) => serde_json::from_str(text)
            .map_err(|e| usage(format!("--options {text:?} is not valid JSON: {e}")))?,
    };
    let input = |name: &String, hidden| InputDecl {
        name: name.clone(),
        kind: "String".to_owned(),
        description: None,
        default: None,
        hidden,
    };
    let output = |name: &String, error_output| OutputDecl {
        name: name.clone(),
        kind: "String".to_owned(),
        description: None,
        error_output,
        hidden: false,
    };
    Ok(ConfigSpec {
        id: args.id.clone(),
        name: args.name.clone().unwrap_or_default(),
        group: group.clone(),
        config: Value::String(body),
        inputs: (args.inputs.iter().map(|n| input(n, false)))
            .chain(args.hidden_inputs.iter().map(|n| input(n, true)))
            .collect(),
        outputs: (args.outputs.iter().map(|n| output(n, false)))
            .chain(args.error_outputs.iter().map(|n| output(n, true)))
            .collect(),
        options,
        ..ConfigSpec::default()
    })
}

fn has_spec_flags(args: &CreateConfigArgs) -> bool {
    args.group.is_some()
        || args.config_file.is_some()
        || args.config.is_some()
        || args.id.is_some()
        || args.name.is_some()
        || !args.inputs.is_empty()
        || !args.hidden_inputs.is_empty()
        || !args.outputs.is_empty()
        || !args.error_outputs.is_empty()
        || args.options.is_some()
}

/// Collects `--input NAME=VALUE` (string values) and `--input-json NAME=JSON` into the
/// input values of a deployment. A name given twice is refused.
pub(crate) fn input_values(
    strings: &[String],
    json: &[String],
) -> Result<BTreeMap<String, Value>, CliError> {
    let mut values = BTreeMap::new();
    let strings = strings.iter().map(|arg| {
        let (name, value) = split_assignment("--input", arg)?;
        Ok::<_, CliError>((name, Value::String(value.to_owned())))
    });
    let json = json.iter().map(|arg| {
        let (name, text) = split_assignment("--input-json", arg)?;
        let value = serde_json::from_str(text).map_err(|e| {
            usage(format!(
                "--input-json {arg:?}: value is not valid JSON: {e}"
            ))
        })?;
        Ok::<_, CliError>((name, value))
    });
    for pair in strings.chain(json) {
        let (name, value) = pair?;
        if values.insert(name.to_owned(), value).is_some() {
            return Err(usage(format!("input {name:?} is given more than once")));
        }
    }
    Ok(values)
}

/// Splits `NAME=VALUE` at the first `=`; `flag` names the option in errors.
pub(crate) fn split_assignment<'a>(
    flag: &str,
    arg: &'a str,
) -> Result<(&'a str, &'a str), CliError> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(usage(format!(
            "{flag} {arg:?}: expected NAME=VALUE, found no '='"
        )));
    };
    if !is_input_name(name) {
        return Err(usage(format!(
            "{flag} {arg:?}: input name {name:?} must be non-empty and hold no NUL"
        )));
    }
    Ok((name, value))
}

fn usage(message: impl Into<String>) -> CliError {
    CliError::Usage(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn no_files(path: &Path) -> io::Result<String> {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no {}", path.display()),
        ))
    }

    fn one_file(text: &'static str) -> impl Fn(&Path) -> io::Result<String> {
        move |_| Ok(text.to_owned())
    }

    #[test]
    fn assignments_split_at_the_first_equals_sign() {
        assert_eq!(
            split_assignment("--input", "url=http://x/?a=b").expect("ok"),
            ("url", "http://x/?a=b")
        );
        assert_eq!(
            split_assignment("--input", "empty=").expect("ok"),
            ("empty", "")
        );
    }

    #[test]
    fn a_missing_equals_sign_names_the_flag_and_the_value() {
        let err = split_assignment("--input", "port5432").expect_err("no =");
        assert_eq!(
            err.to_string(),
            "--input \"port5432\": expected NAME=VALUE, found no '='"
        );
        let err = split_assignment("--input-json", "=1").expect_err("no name");
        assert!(err.to_string().starts_with("--input-json \"=1\""), "{err}");
    }

    #[test]
    fn input_values_are_strings_or_json_and_unique() {
        let values = input_values(
            &["dir=/tmp/x".into(), "port=5432".into()],
            &["tags=[\"a\"]".into(), "n=3".into()],
        )
        .expect("ok");
        assert_eq!(values["port"], json!("5432"));
        assert_eq!(values["n"], json!(3));
        assert_eq!(values["tags"], json!(["a"]));
        let err = input_values(&["a=1".into()], &["a=1".into()]).expect_err("twice");
        assert_eq!(err.to_string(), "input \"a\" is given more than once");
        let err = input_values(&[], &["a={".into()]).expect_err("bad json");
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }

    #[test]
    fn flags_build_a_script_spec() {
        let args = CreateConfigArgs {
            group: Some("script".into()),
            config: Some("echo hi".into()),
            inputs: vec!["dir".into()],
            hidden_inputs: vec!["secret".into()],
            outputs: vec!["url".into()],
            error_outputs: vec!["oops".into()],
            options: Some("{\"x\": 1}".into()),
            ..Default::default()
        };
        let spec = config_spec(&args, no_files).expect("spec");
        assert_eq!(spec.config, json!("echo hi"));
        assert_eq!(spec.options, json!({"x": 1}));
        let hidden: Vec<_> = spec
            .inputs
            .iter()
            .map(|i| (i.name.as_str(), i.hidden))
            .collect();
        assert_eq!(hidden, [("dir", false), ("secret", true)]);
        assert!(spec.outputs[1].error_output);
        spec.validate().expect("valid");
    }

    #[test]
    fn config_body_comes_from_exactly_one_place() {
        let both = CreateConfigArgs {
            group: Some("script".into()),
            config: Some("x".into()),
            config_file: Some(PathBuf::from("a.sh")),
            ..Default::default()
        };
        let err = config_spec(&both, one_file("y")).expect_err("both");
        assert!(
            err.to_string().contains("--config-file and --config"),
            "{err}"
        );
        let neither = CreateConfigArgs {
            group: Some("script".into()),
            ..Default::default()
        };
        let err = config_spec(&neither, one_file("y")).expect_err("neither");
        assert!(
            err.to_string()
                .contains("--config-file PATH or --config TEXT"),
            "{err}"
        );
        let nothing = config_spec(&CreateConfigArgs::default(), one_file("y")).expect_err("none");
        assert!(nothing.to_string().contains("--spec FILE"), "{nothing}");
        let file = CreateConfigArgs {
            group: Some("script".into()),
            config_file: Some(PathBuf::from("a.sh")),
            ..Default::default()
        };
        let spec = config_spec(&file, one_file("#!/bin/sh\n")).expect("file");
        assert_eq!(spec.config, json!("#!/bin/sh\n"));
        let err = config_spec(&file, no_files).expect_err("missing file");
        assert!(matches!(err, CliError::Read { .. }), "{err:?}");
    }

    #[test]
    fn spec_files_stand_alone() {
        let spec_only = CreateConfigArgs {
            spec: Some(PathBuf::from("s.json")),
            ..Default::default()
        };
        let spec = config_spec(
            &spec_only,
            one_file(r#"{"group": "json-echo", "config": {"a": 1}}"#),
        )
        .expect("spec");
        assert_eq!(spec.config, json!({"a": 1}));
        let err = config_spec(
            &spec_only,
            one_file(r#"{"group": "g", "config_file": "x"}"#),
        )
        .expect_err("not a spec field");
        assert!(
            err.to_string()
                .starts_with("s.json: not a valid config spec"),
            "{err}"
        );
        let mixed = CreateConfigArgs {
            group: Some("script".into()),
            ..spec_only
        };
        let err = config_spec(&mixed, one_file("{}")).expect_err("mixed");
        assert!(
            err.to_string().contains("--spec FILE cannot be combined"),
            "{err}"
        );
    }
}
