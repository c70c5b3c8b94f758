//! The item shapes the oracle runs, and what each must show: the same hook input and
//! verdict under Heat's dispatcher and Flue, or one of the deliberate differences
//! docs/heat.md lists.

use serde_json::{Value, json};

use super::verdict::Verdict;

/// The output a `script` case's body writes the environment it got into (`NAME=value`).
pub(super) const ENV_OUTPUT: &str = "hook_env";

/// Stands for the test's scratch dir in a config body.
pub(super) const SCRATCH: &str = "@SCRATCH@";

/// Heat's derived inputs, which every script case's body records too.
const DERIVED: [&str; 5] = [
    "deploy_server_id",
    "deploy_action",
    "deploy_stack_id",
    "deploy_resource_name",
    "deploy_signal_transport",
];

/// One item shape.
pub(super) struct Case {
    /// The case's name, also its config's id.
    pub name: &'static str,
    pub group: &'static str,
    /// The config body; a `script` body gets the recording of its environment inserted.
    pub config: Value,
    pub inputs: Value,
    pub outputs: Value,
    pub values: Value,
    pub verdict: Verdict,
}

impl Case {
    /// The config's id.
    pub fn id(&self) -> &str {
        self.name
    }

    /// The declared outputs; a `script` case also declares [`ENV_OUTPUT`].
    pub fn outputs(&self) -> Vec<Value> {
        let mut outputs = self.outputs.as_array().cloned().unwrap_or_default();
        if self.group == "script" {
            outputs.push(json!({"name": ENV_OUTPUT}));
        }
        outputs
    }

    /// The body both sides run, [`SCRATCH`] replaced by `scratch`.
    pub fn body(&self, scratch: &str) -> Value {
        let body = match (self.group, &self.config) {
            ("script", Value::String(script)) => {
                let (head, rest) = script
                    .strip_prefix("#!/bin/sh\n")
                    .map_or(("", script.as_str()), |rest| ("#!/bin/sh\n", rest));
                json!(format!("{head}{}{rest}", self.record_env()))
            }
            _ => self.config.clone(),
        };
        let text = serde_json::to_string(&body).expect("ser");
        serde_json::from_str(&text.replace(SCRATCH, scratch)).expect("body")
    }

    /// Shell lines writing each input's variable (`@unset@` when it is not set) into
    /// `$heat_outputs_path.<ENV_OUTPUT>`.
    fn record_env(&self) -> String {
        let declared = self.inputs.as_array().into_iter().flatten();
        let mut names: Vec<String> = declared
            .map(|i| i["name"].as_str().expect("name").to_owned())
            .collect();
        names.extend(
            self.values
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone()),
        );
        names.extend(DERIVED.iter().map(|n| (*n).to_owned()));
        names.sort();
        names.dedup();
        format!(
            "for n in {}; do eval \"v=\\${{$n-@unset@}}\"; printf '%s=%s\\n' \"$n\" \"$v\"; \
             done > \"$heat_outputs_path.{ENV_OUTPUT}\"\n",
            names.join(" ")
        )
    }

    /// The config spec Flue gets.
    pub fn config_spec(&self, scratch: &str) -> Value {
        json!({
            "id": self.name, "group": self.group, "config": self.body(scratch),
            "inputs": self.inputs, "outputs": self.outputs(),
        })
    }
}

/// The test's own hooks (name, text), each reading its item and answering as named.
pub(super) fn hooks() -> [(&'static str, &'static str); 6] {
    [
        (
            "answers",
            "#!/bin/sh\ncat > /dev/null\necho '{\"deploy_status_code\": 0, \"result\": \"r\"}'\nexit 1\n",
        ),
        (
            "no-status",
            "#!/bin/sh\ncat > /dev/null\necho '{\"result\": \"r\"}'\nexit 2\n",
        ),
        ("quiet", "#!/bin/sh\ncat > /dev/null\necho note >&2\n"),
        ("text", "#!/bin/sh\ncat > /dev/null\necho oops\nexit 4\n"),
        (
            "error-out",
            "#!/bin/sh\ncat > /dev/null\necho '{\"deploy_status_code\": 0, \"errors\": \"\"}'\n",
        ),
        (
            "status-text",
            "#!/bin/sh\ncat > /dev/null\necho '{\"deploy_status_code\": \"0\", \"result\": \"r\"}'\n",
        ),
    ]
}

/// A playbook that computes with a number and branches on a boolean.
const PLAYBOOK: &str = "\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - copy:
        content: '{{ app_port + 1 }}'
        dest: '{{ heat_outputs_path }}.next_port'
      when: enabled
";

/// Every case.
pub(super) fn cases() -> Vec<Case> {
    let result = json!([{"name": "result"}]);
    let case =
        |name, group, config: Value, inputs: Value, outputs: &Value, values: Value, verdict| Case {
            name,
            group,
            config,
            inputs,
            outputs: outputs.clone(),
            values,
            verdict,
        };
    vec![
        case(
            "script-values",
            "script",
            json!("#!/bin/sh\nprintf '%s' \"$name\" > \"$heat_outputs_path.result\"\n"),
            json!([{"name": "name"}, {"name": "port_text", "type": "String"}, {"name": "flag"},
                   {"name": "ratio"}, {"name": "big"}, {"name": "greeting", "default": "hello"}]),
            &result,
            json!({"name": "web", "port_text": 8080, "flag": true, "ratio": 1.5, "big": 1e16, "extra": "x"}),
            Verdict::Same,
        ),
        // heat-templates' example-software-deploymentgroup-template.yaml, with its inputs unset.
        case(
            "script-missing-values",
            "script",
            json!("#!/bin/sh\necho $foo >> \"$heat_outputs_path.$bar\"\n"),
            json!([{"name": "foo"}, {"name": "bar"}]),
            &json!([{"name": "None"}]),
            json!({}),
            Verdict::Same,
        ),
        case(
            "script-number",
            "script",
            json!("#!/bin/sh\necho \"$port\"\n"),
            json!([{"name": "port", "type": "Number"}]),
            &result,
            json!({"port": 8080}),
            Verdict::ScriptTypeError,
        ),
        case(
            "script-missing-number",
            "script",
            json!("#!/bin/sh\necho \"$port\"\n"),
            json!([{"name": "port", "type": "Number"}]),
            &result,
            json!({}),
            Verdict::ScriptTypeError,
        ),
        case(
            "script-error-output",
            "script",
            json!("#!/bin/sh\n: > \"$heat_outputs_path.errors\"\n"),
            json!([]),
            &json!([{"name": "errors", "error_output": true}]),
            json!({}),
            Verdict::Same,
        ),
        case(
            "script-exit-3",
            "script",
            json!("#!/bin/sh\nprintf r > \"$heat_outputs_path.result\"\nexit 3\n"),
            json!([]),
            &result,
            json!({}),
            Verdict::Same,
        ),
        case(
            "script-no-shebang",
            "script",
            json!("printf r > \"$heat_outputs_path.result\"\n"),
            json!([]),
            &result,
            json!({}),
            Verdict::NoShebang,
        ),
        case(
            "hiera-typed",
            "hiera",
            json!({"hierarchy": ["common"], "datafiles": {"common": {"k": "v"}}}),
            json!([{"name": "port", "type": "Number"}, {"name": "enabled", "type": "Boolean"},
                   {"name": "settings", "type": "Json"}, {"name": "hosts", "type": "CommaDelimitedList"},
                   {"name": "label", "description": "a String"}, {"name": "unset"},
                   {"name": "unset_number", "type": "Number"},
                   {"name": "ratio", "type": "Number", "default": 0.25}]),
            &json!([]),
            json!({"port": 8080, "enabled": true, "settings": {"a": [1]}, "hosts": ["h1", "h2"],
                   "label": 42, "extra": true}),
            Verdict::Same,
        ),
        case(
            "json-file",
            "json-file",
            json!({format!("{SCRATCH}/json-file/out.json"): {"a": [1]}}),
            json!([{"name": "unset"}]),
            &json!([]),
            json!({}),
            Verdict::Same,
        ),
        case(
            "ansible-typed",
            "ansible",
            json!(PLAYBOOK),
            json!([{"name": "app_port", "type": "Number"}, {"name": "enabled", "type": "Boolean"}]),
            &json!([{"name": "next_port"}]),
            json!({"app_port": 8080, "enabled": true}),
            Verdict::Same,
        ),
        case(
            "heat-ungrouped",
            "Heat::Ungrouped",
            json!("#cloud-config\n{}\n"),
            json!([]),
            &json!([]),
            json!({}),
            Verdict::SkippedAsData,
        ),
        case(
            "os-apply-config",
            "os-apply-config",
            json!({"a": 1}),
            json!([]),
            &json!([]),
            json!({}),
            Verdict::SkippedAsData,
        ),
        case(
            "unknown-group",
            "no-such-hook",
            json!(""),
            json!([]),
            &json!([]),
            json!({}),
            Verdict::NoHook,
        ),
        case(
            "json-answer-failed-exit",
            "answers",
            json!(""),
            json!([{"name": "unset"}]),
            &result,
            json!({}),
            Verdict::Same,
        ),
        case(
            "json-without-status-failed-exit",
            "no-status",
            json!(""),
            json!([]),
            &result,
            json!({}),
            Verdict::StatusFromExit(2),
        ),
        case(
            "silent",
            "quiet",
            json!(""),
            json!([]),
            &result,
            json!({}),
            Verdict::Same,
        ),
        case(
            "text-failed-exit",
            "text",
            json!(""),
            json!([]),
            &result,
            json!({}),
            Verdict::Same,
        ),
        case(
            "json-empty-error-output",
            "error-out",
            json!(""),
            json!([]),
            &json!([{"name": "errors", "error_output": true}]),
            json!({}),
            Verdict::Same,
        ),
        case(
            "status-as-text",
            "status-text",
            json!(""),
            json!([]),
            &result,
            json!({}),
            Verdict::Same,
        ),
        case(
            "typed-from-text",
            "quiet",
            json!(""),
            json!([{"name": "port", "type": "Number"}]),
            &json!([]),
            json!({"port": "8080"}),
            Verdict::TypedFromText {
                input: "port",
                heat: json!("8080"),
                flue: json!(8080),
            },
        ),
    ]
}
