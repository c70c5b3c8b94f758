//! Limits on what the API accepts, so that whatever is accepted can be stored, read back
//! by the gateway, the agent and hooks, and run.
//!
//! Two kinds of limit live here, both checked by the validation functions of the API
//! bodies ([`crate::ConfigSpec::validate`], [`crate::CreateDeployment::validate`],
//! [`crate::PutStack::validate`]) and, for values the gateway resolves itself (defaults,
//! `inputs_from`, `input_refs`), by [`check_input_values`]:
//!
//! - nesting depth ([`MAX_VALUE_DEPTH`], [`MAX_STATE_DEPTH`]): every JSON reader in the
//!   chain (serde_json's) refuses a document nested 128 containers deep;
//! - the environment of the built-in `script` group ([`SCRIPT_GROUP`]): each input is an
//!   environment variable, and Linux refuses to start a program whose environment holds a
//!   NUL or too many bytes.
//!
//! Sizes against the broker's max payload depend on the broker, so the gateway checks
//! them (its `broker` module).

use serde_json::Value;

/// Deepest nesting of a value the API accepts: an input value, a declared default, a
/// config body, a hook or ad-hoc action body, `options`.
///
/// Depth counts containers: a string or number is 0, `{"a": 1}` 1, `{"a": [1]}` 2.
///
/// serde_json, which every Flue process uses to read JSON, refuses a document with 128
/// containers nested (its recursion limit), so an accepted value plus the deepest
/// envelope it is ever embedded in must stay at or under 127. The deepest envelopes:
///
/// | document | path to the value | envelope |
/// |---|---|---|
/// | request (gateway → agent) | request → config → inputs[i] → default | 4 |
/// | request | request → config → actions → name → config | 4 |
/// | gateway record / API read | record → deployment → input_values | 3 |
/// | list read | [ → deployment → input_values | 3 |
/// | hook item (agent → hook) | item → inputs[i] → value | 3 |
/// | answer (agent → gateway), event | message → result / data → outputs | 3 |
///
/// 64 + 4 = 68, which leaves 59 levels for envelopes to come. With
/// `substitute_inputs`, an input value replaces a `{"get_input": …}` inside the body
/// a hook reads, so a hook may get up to 64 + 63 + 1 = 128 levels: fine for Python's
/// reader (heat-agents), one too many for serde_json; keep such bodies shallow.
pub const MAX_VALUE_DEPTH: usize = 64;

/// Deepest nesting of a stack's `state` (`PUT /v1/stacks/{id}`), counted from `state`
/// itself: the engine's own structure (state → units → unit → baseline → values, 5)
/// around values of at most [`MAX_VALUE_DEPTH`], plus room. The stack record and a list
/// of stacks add 2, so 96 + 2 = 98 ≤ 127.
pub const MAX_STATE_DEPTH: usize = 96;

/// The built-in hook group whose inputs become environment variables.
pub const SCRIPT_GROUP: &str = "script";

/// Most bytes one `NAME=value` environment string of a `script` hook may take, its
/// terminating NUL included: Linux's `MAX_ARG_STRLEN` (32 pages of 4 KiB); a longer one
/// makes `execve` fail with "Argument list too long".
pub const MAX_SCRIPT_ENV_VAR_BYTES: usize = 128 * 1024;

/// Most bytes all inputs of a `script` hook may take together as `NAME=value` strings
/// (NULs included).
///
/// Linux allows argv + envp up to a quarter of the stack rlimit (2 MiB at the usual
/// 8 MiB); 1 MiB leaves the other half to the agent's own variables, `PATH` and the
/// inherited environment.
pub const MAX_SCRIPT_ENV_BYTES: usize = 1024 * 1024;

/// Why a value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A value nests containers deeper than its limit.
    #[error("{field} is nested too deeply: the limit is {limit} levels")]
    TooDeep {
        /// Where the value is in the body (`input_values.foo`, `inputs[2].default`, …).
        field: String,
        /// The limit.
        limit: usize,
    },
    /// A `script` input holds a NUL, which no environment variable can carry.
    #[error(
        "{field} contains a NUL character, which the `script` group cannot pass in an environment variable"
    )]
    NulInEnv {
        /// Where the value is in the body.
        field: String,
    },
    /// One `script` input is too large for an environment variable.
    #[error(
        "{field} takes {size} bytes as the environment variable `NAME=value` of a `script` hook; the limit is {limit}"
    )]
    EnvVarTooLarge {
        /// Where the value is in the body.
        field: String,
        /// Bytes of `NAME=value` plus its NUL.
        size: usize,
        /// [`MAX_SCRIPT_ENV_VAR_BYTES`].
        limit: usize,
    },
    /// All `script` inputs together are too large for the environment.
    #[error(
        "the inputs take {size} bytes together in the environment of a `script` hook; the limit is {limit}"
    )]
    EnvTooLarge {
        /// Bytes of every `NAME=value` plus its NUL.
        size: usize,
        /// [`MAX_SCRIPT_ENV_BYTES`].
        limit: usize,
    },
}

/// How deeply `value` nests containers, counting no further than `stop` (so that a
/// hostile value costs no more than the limit it is checked against).
pub fn depth(value: &Value, stop: usize) -> usize {
    // Iterative: a value built in memory has no recursion limit to protect the stack.
    let mut deepest = 0;
    let mut todo = vec![(value, 0usize)];
    while let Some((v, above)) = todo.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        let here = above + 1;
        deepest = deepest.max(here);
        if deepest > stop {
            return deepest;
        }
        todo.extend(children.map(|c| (c, here)));
    }
    deepest
}

/// Refuses `value` (found at `field`) when it nests deeper than [`MAX_VALUE_DEPTH`].
pub fn check_depth(field: impl FnOnce() -> String, value: &Value) -> Result<(), LimitError> {
    check_depth_within(field, value, MAX_VALUE_DEPTH)
}

/// Refuses `value` (found at `field`) when it nests deeper than `limit`.
pub fn check_depth_within(
    field: impl FnOnce() -> String,
    value: &Value,
    limit: usize,
) -> Result<(), LimitError> {
    // Counting stops one past the limit, so the value's full depth is not known.
    if depth(value, limit) <= limit {
        return Ok(());
    }
    Err(LimitError::TooDeep {
        field: field(),
        limit,
    })
}

/// Checks the input values a deployment runs with, as the gateway resolved them
/// (given values, `inputs_from`, `input_refs`, defaults): each within
/// [`MAX_VALUE_DEPTH`], and for the `script` group, each passable as an environment
/// variable and all together within [`MAX_SCRIPT_ENV_BYTES`].
///
/// `field` names where an input's value came from (`input_values.foo`,
/// `input_refs.foo`, …). Inputs whose name no environment entry can carry are skipped by
/// the `script` group (and here), so they count for nothing. NUL in a value is fine for
/// every other group: hooks get values as JSON.
pub fn check_input_values<'a>(
    group: &str,
    values: impl IntoIterator<Item = (&'a String, &'a Value)>,
    field: impl Fn(&str) -> String,
) -> Result<(), LimitError> {
    let mut total = 0;
    for (name, value) in values {
        check_depth(|| field(name), value)?;
        if group == SCRIPT_GROUP && crate::config::is_input_name(name) {
            total += check_env_var(|| field(name), name, value)?;
        }
    }
    if total > MAX_SCRIPT_ENV_BYTES {
        return Err(LimitError::EnvTooLarge {
            size: total,
            limit: MAX_SCRIPT_ENV_BYTES,
        });
    }
    Ok(())
}

/// Checks that `name=value` can be one environment variable of a `script` hook, as the
/// agent sets it ([`crate::heat::env_text`]: a string as is, anything else as the JSON
/// Python's `json.dumps` writes); returns the bytes it takes, NUL included.
pub fn check_env_var(
    field: impl Fn() -> String,
    name: &str,
    value: &Value,
) -> Result<usize, LimitError> {
    let len = match value {
        // JSON text escapes NUL, so only a string can carry one into the environment.
        Value::String(s) if s.contains('\0') => {
            return Err(LimitError::NulInEnv { field: field() });
        }
        other => crate::heat::env_text(other).len(),
    };
    let size = name.len() + 1 + len + 1;
    if size > MAX_SCRIPT_ENV_VAR_BYTES {
        return Err(LimitError::EnvVarTooLarge {
            field: field(),
            size,
            limit: MAX_SCRIPT_ENV_VAR_BYTES,
        });
    }
    Ok(size)
}

/// A value nested `levels` deep: `[[…"x"…]]` (for tests and documentation examples).
pub fn nested(levels: usize) -> Value {
    (0..levels).fold(Value::String("x".to_owned()), |v, _| Value::Array(vec![v]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!("x"), 100), 0);
        assert_eq!(depth(&json!({"a": 1}), 100), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]}), 100), 4);
        assert_eq!(depth(&nested(64), 100), 64);
        assert_eq!(depth(&nested(500), 10), 11, "counting stops past the limit");
    }

    #[test]
    fn values_at_the_limit_pass_and_one_deeper_is_refused_by_name() {
        assert!(check_depth(|| "config".into(), &nested(MAX_VALUE_DEPTH)).is_ok());
        let err = check_depth(|| "config".into(), &nested(MAX_VALUE_DEPTH + 1)).expect_err("deep");
        assert_eq!(
            err.to_string(),
            "config is nested too deeply: the limit is 64 levels"
        );
    }

    #[test]
    fn a_value_at_the_limit_in_its_deepest_envelope_is_readable_by_serde_json() {
        // request → config → inputs[0] → default: the deepest envelope (4).
        let doc = json!({"config": {"inputs": [{"default": nested(MAX_VALUE_DEPTH)}]}});
        let text = serde_json::to_string(&doc).expect("ser");
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        // One more level than serde_json reads, for contrast.
        let text = serde_json::to_string(&nested(128)).expect("ser");
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }

    #[test]
    fn script_inputs_must_fit_the_environment() {
        let field = |n: &str| format!("input_values.{n}");
        let values = |pairs: &[(&str, Value)]| -> Vec<(String, Value)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        };
        let check = |group: &str, v: &[(String, Value)]| {
            check_input_values(group, v.iter().map(|(k, v)| (k, v)), field)
        };
        let nul = values(&[("a", json!("x\0y"))]);
        assert_eq!(
            check("script", &nul),
            Err(LimitError::NulInEnv {
                field: "input_values.a".into()
            })
        );
        assert!(
            check("ansible", &nul).is_ok(),
            "JSON carries NUL to other hooks"
        );
        assert!(check("script", &values(&[("a", json!(["x\0y"]))])).is_ok());

        let at_limit = "x".repeat(MAX_SCRIPT_ENV_VAR_BYTES - 3);
        assert!(check("script", &values(&[("a", json!(at_limit))])).is_ok());
        let over = format!("{at_limit}x");
        assert!(matches!(
            check("script", &values(&[("a", json!(over))])),
            Err(LimitError::EnvVarTooLarge { size: 131_073, .. })
        ));

        let many: Vec<(String, Value)> = (0..9)
            .map(|i| (format!("v{i}"), json!("x".repeat(120_000))))
            .collect();
        assert!(matches!(
            check("script", &many),
            Err(LimitError::EnvTooLarge { .. })
        ));
        assert!(check("script", &many[..8]).is_ok());
    }
}
