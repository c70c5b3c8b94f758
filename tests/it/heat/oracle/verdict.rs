//! What a case of the oracle must show: the same hook input and verdict under Heat's
//! dispatcher and Flue, or exactly one of the deliberate differences docs/heat.md lists.

use serde_json::{Value, json};

use super::Side;

/// What a case must show.
#[derive(Debug, Clone)]
pub(super) enum Verdict {
    /// The same hook input and the same verdict.
    Same,
    /// A group os-collect-config hands to os-apply-config, with no hook: the dispatcher
    /// skips it and signals nothing; Flue completes it, saying it was skipped.
    SkippedAsData,
    /// Any other group with no hook: the dispatcher skips it and signals nothing (Heat
    /// waits for its timeout); Flue fails it at once, naming the hook dirs.
    NoHook,
    /// `hook-script.py` cannot put a number, boolean or null in the environment: under Heat
    /// the stock hook stops with a `TypeError` before the script runs; Flue's built-in
    /// `script` exports JSON text (null as empty) and runs it.
    ScriptTypeError,
    /// A script without `#!`: `hook-script.py` cannot exec it (`Exec format error`);
    /// Flue's built-in `script` runs it with `/bin/sh`.
    NoShebang,
    /// A JSON answer without `deploy_status_code` from a hook that exited non-zero: Heat
    /// loses the exit status and completes; Flue fails with it.
    StatusFromExit(i64),
    /// A typed input given as text: Heat passes the text on, Flue converts it to the
    /// declared type (`heat`, `flue`: the value each hands the hook).
    TypedFromText {
        input: &'static str,
        heat: Value,
        flue: Value,
    },
}

impl Verdict {
    /// Asserts what the verdict says of Heat's side and Flue's side of case `name`.
    pub fn check(&self, name: &str, heat: &Side, flue: &Side) {
        let at = format!("{name}: Heat {heat:#?}\nFlue {flue:#?}");
        let (h, f) = (heat.judged.as_ref(), flue.judged.as_ref());
        match self {
            Self::Same => {
                assert!(heat.input.is_some(), "{at}");
                assert_eq!(heat.input, flue.input, "the same hook input: {at}");
                assert!(h.is_some(), "{at}");
                assert_eq!(h, f, "the same verdict: {at}");
            }
            Self::SkippedAsData | Self::NoHook => {
                assert!(
                    heat.input.is_none() && flue.input.is_none(),
                    "no hook ran: {at}"
                );
                assert!(h.is_none(), "the dispatcher signals nothing: {at}");
                let f = f.expect("Flue answers");
                let skipped = matches!(self, Self::SkippedAsData);
                assert_eq!(f.complete, skipped, "{at}");
                assert!(flue.note.contains("no hook for group"), "{at}");
                assert_eq!(flue.note.contains("skipped"), skipped, "{at}");
                if name != "os-apply-config" {
                    assert!(heat.note.contains("Skipping group"), "{at}");
                }
            }
            Self::ScriptTypeError | Self::NoShebang => {
                let why = match self {
                    Self::ScriptTypeError => "TypeError",
                    _ => "Exec format error",
                };
                assert!(heat.note.contains(why), "{at}");
                assert!(
                    heat.input.is_none(),
                    "the script never ran under Heat: {at}"
                );
                let h = h.expect("Heat's signal");
                assert!(!h.complete && h.status_code == json!(1), "{at}");
                let f = f.expect("Flue answers");
                assert!(f.complete && flue.input.is_some(), "{at}");
            }
            Self::StatusFromExit(code) => {
                assert_eq!(heat.input, flue.input, "the same hook input: {at}");
                let (h, f) = (h.expect("Heat's signal"), f.expect("Flue answers"));
                assert!(h.complete && h.status_code.is_null(), "{at}");
                assert!(!f.complete && f.status_code == json!(code), "{at}");
                assert_eq!(h.outputs, f.outputs, "{at}");
            }
            Self::TypedFromText {
                input,
                heat: hv,
                flue: fv,
            } => {
                let value_of = |side: &Side| {
                    let inputs = side.input.as_ref().expect("hook input")["inputs"].clone();
                    let mut inputs = inputs.as_array().cloned().expect("inputs");
                    let at = inputs.iter().position(|i| i["name"] == json!(input));
                    let value = inputs[at.expect("the input")]["value"].take();
                    (value, inputs)
                };
                let ((heat_value, heat_rest), (flue_value, flue_rest)) =
                    (value_of(heat), value_of(flue));
                assert_eq!((&heat_value, &flue_value), (hv, fv), "{at}");
                assert_eq!(heat_rest, flue_rest, "otherwise the same inputs: {at}");
                assert_eq!(h, f, "the same verdict: {at}");
            }
        }
    }
}
