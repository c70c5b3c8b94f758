//! Parameter `constraints`, checked with Heat's rules and messages
//! (`heat/engine/constraints.py`): `length`, `range`, `modulo`, `allowed_values`,
//! `allowed_pattern`. A `custom_constraint` (`nova.flavor`, …) asks an OpenStack
//! service Flue does not talk to: it is accepted and reported as not checked.

use serde_json::Value;

use super::{ParamType, TemplateError, check_keys, optional_string};
use crate::functions::data::same;
use crate::functions::kind_of;
use crate::functions::to_text;
use crate::functions::versions::TemplateVersion;

/// One constraint of a parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// What it requires.
    pub rule: Rule,
    /// Shown instead of Heat's message when the value breaks the rule.
    pub description: Option<String>,
}

/// The kinds of constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// `length: {min, max}` of a string (characters) or a list or map (items).
    Length {
        /// At least.
        min: Option<f64>,
        /// At most.
        max: Option<f64>,
    },
    /// `range: {min, max}` of a number.
    Range {
        /// At least.
        min: Option<f64>,
        /// At most.
        max: Option<f64>,
    },
    /// `modulo: {step, offset}`: `value % step == offset`.
    Modulo {
        /// The divisor, not zero.
        step: f64,
        /// The remainder, smaller than `step` in size.
        offset: f64,
    },
    /// `allowed_values: [...]` (every item, for a list).
    AllowedValues(Vec<Value>),
    /// `allowed_pattern: regex` that the whole string must match.
    AllowedPattern(String),
    /// `custom_constraint: name`: not checked by Flue.
    Custom(String),
}

const KINDS: [&str; 7] = [
    "length",
    "range",
    "modulo",
    "allowed_values",
    "allowed_pattern",
    "custom_constraint",
    "description",
];

/// Parses a parameter's `constraints` list.
pub(super) fn parse(
    value: Option<&Value>,
    kind: ParamType,
    version: TemplateVersion,
    path: &str,
) -> Result<Vec<Constraint>, TemplateError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(TemplateError::new(
                path,
                "must be a list of constraint maps",
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, c)| parse_one(c, kind, version, &format!("{path}[{i}]")))
        .collect()
}

fn parse_one(
    c: &Value,
    kind: ParamType,
    version: TemplateVersion,
    path: &str,
) -> Result<Constraint, TemplateError> {
    let Value::Object(map) = c else {
        return Err(TemplateError::new(path, "must be a constraint map"));
    };
    check_keys(map, path, &KINDS)?;
    let description = optional_string(map.get("description"), &format!("{path}.description"))?;
    let mut rules = map.iter().filter(|(k, _)| *k != "description");
    let (Some((name, arg)), None) = (rules.next(), rules.next()) else {
        return Err(TemplateError::new(
            path,
            "must hold exactly one constraint (and an optional description)",
        ));
    };
    let at = format!("{path}.{name}");
    let allowed_for: &[ParamType] = match name.as_str() {
        "length" => &[
            ParamType::String,
            ParamType::CommaDelimitedList,
            ParamType::Json,
        ],
        "range" | "modulo" => &[ParamType::Number],
        "allowed_values" => &[
            ParamType::String,
            ParamType::Number,
            ParamType::CommaDelimitedList,
            ParamType::Boolean,
        ],
        "allowed_pattern" => &[ParamType::String],
        _ => &[
            ParamType::String,
            ParamType::Number,
            ParamType::CommaDelimitedList,
            ParamType::Boolean,
            ParamType::Json,
        ],
    };
    if !allowed_for.contains(&kind) {
        return Err(TemplateError::new(
            at,
            format!(
                "a {name} constraint does not apply to a {} parameter",
                kind.name()
            ),
        ));
    }
    let rule = match name.as_str() {
        "length" | "range" => {
            let (min, max) = bounds(arg, &at, name == "length")?;
            if name == "length" {
                Rule::Length { min, max }
            } else {
                Rule::Range { min, max }
            }
        }
        "modulo" => {
            if version < TemplateVersion::OCATA {
                return Err(TemplateError::new(
                    at,
                    format!(
                        "modulo needs heat_template_version {} or later",
                        TemplateVersion::OCATA
                    ),
                ));
            }
            let num = |k: &str| arg.get(k).and_then(Value::as_f64);
            let (Some(step), Some(offset)) = (num("step"), num("offset")) else {
                return Err(TemplateError::new(
                    at,
                    "expected {step: <number>, offset: <number>}",
                ));
            };
            if step == 0.0 {
                return Err(TemplateError::new(at, "step cannot be 0"));
            }
            if offset.abs() >= step.abs() || (offset != 0.0 && offset.signum() != step.signum()) {
                return Err(TemplateError::new(
                    at,
                    "offset must be smaller (by absolute value) than step and have the same sign",
                ));
            }
            Rule::Modulo { step, offset }
        }
        "allowed_values" => match arg {
            Value::Array(values) => Rule::AllowedValues(values.clone()),
            other => {
                return Err(TemplateError::new(
                    at,
                    format!("must be a list, got {}", kind_of(other)),
                ));
            }
        },
        "allowed_pattern" => {
            let Value::String(p) = arg else {
                return Err(TemplateError::new(
                    at,
                    "must be a regular expression (a string)",
                ));
            };
            super::pattern::Pattern::new(p).map_err(|e| {
                TemplateError::new(&at, format!("not a valid regular expression: {e}"))
            })?;
            Rule::AllowedPattern(p.clone())
        }
        _ => match arg {
            Value::String(name) => Rule::Custom(name.clone()),
            _ => {
                return Err(TemplateError::new(
                    at,
                    "must be a constraint name such as nova.flavor",
                ));
            }
        },
    };
    Ok(Constraint { rule, description })
}

fn bounds(
    arg: &Value,
    path: &str,
    integral: bool,
) -> Result<(Option<f64>, Option<f64>), TemplateError> {
    let Value::Object(map) = arg else {
        return Err(TemplateError::new(
            path,
            "expected {min: <number>, max: <number>}",
        ));
    };
    check_keys(map, path, &["min", "max"])?;
    let bound = |k: &str| -> Result<Option<f64>, TemplateError> {
        match map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if !integral || n.is_i64() || n.is_u64() => Ok(n.as_f64()),
            Some(_) if integral => Err(TemplateError::new(path, "min/max length must be integral")),
            Some(_) => Err(TemplateError::new(path, "min/max must be numeric")),
        }
    };
    let (min, max) = (bound("min")?, bound("max")?);
    if min.is_none() && max.is_none() {
        return Err(TemplateError::new(path, "range must have min and/or max"));
    }
    Ok((min, max))
}

/// Checks `value` against each constraint; the error is Heat's (or the constraint's
/// description). For a hidden parameter the message never shows the value.
pub fn check(constraints: &[Constraint], value: &Value, hidden: bool) -> Result<(), String> {
    for c in constraints {
        if valid(&c.rule, value) {
            continue;
        }
        return Err(match (&c.description, hidden) {
            (Some(d), _) => d.clone(),
            (None, false) => broken(&c.rule, value),
            (None, true) => rule_text(&c.rule),
        });
    }
    Ok(())
}

/// The `custom_constraint` names among `constraints`.
pub fn custom(constraints: &[Constraint]) -> impl Iterator<Item = &str> {
    constraints.iter().filter_map(|c| match &c.rule {
        Rule::Custom(name) => Some(name.as_str()),
        _ => None,
    })
}

fn length(value: &Value) -> usize {
    match value {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 0,
    }
}

fn within(n: f64, min: Option<f64>, max: Option<f64>) -> bool {
    min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m)
}

fn valid(rule: &Rule, value: &Value) -> bool {
    match rule {
        #[allow(clippy::cast_precision_loss)] // lengths far below 2^52
        Rule::Length { min, max } => within(length(value) as f64, *min, *max),
        Rule::Range { min, max } => value.as_f64().is_some_and(|n| within(n, *min, *max)),
        Rule::Modulo { step, offset } => value.as_f64().is_some_and(|n| {
            // Python's `%`: the remainder takes the divisor's sign.
            let r = ((n % step) + step) % step;
            (r - offset).abs() < f64::EPSILON
        }),
        Rule::AllowedValues(allowed) => {
            let ok = |v: &Value| {
                allowed
                    .iter()
                    .any(|a| same(a, v) || to_text(a) == to_text(v))
            };
            match value {
                Value::Array(items) => items.iter().all(ok),
                v => ok(v),
            }
        }
        Rule::AllowedPattern(p) => {
            // Heat: `re.match(pattern, value)` must end at the end of the value.
            match (super::pattern::Pattern::new(p), value) {
                (Ok(re), Value::String(s)) => re.matches_whole(s),
                _ => false,
            }
        }
        Rule::Custom(_) => true,
    }
}

fn num(n: Option<f64>) -> String {
    n.map_or_else(
        || "None".to_owned(),
        |n| Value::from(n).to_string().trim_end_matches(".0").to_owned(),
    )
}

/// Heat's message for a value that breaks `rule`, naming the value.
fn broken(rule: &Rule, value: &Value) -> String {
    match rule {
        Rule::Length { min, max } => format!(
            "length ({}) is out of range (min: {}, max: {})",
            length(value),
            num(*min),
            num(*max)
        ),
        Rule::Range { min, max } => format!(
            "{} is out of range (min: {}, max: {})",
            to_text(value),
            num(*min),
            num(*max)
        ),
        Rule::Modulo { step, offset } => format!(
            "{} is not a multiple of {} with an offset of {}",
            to_text(value),
            num(Some(*step)),
            num(Some(*offset))
        ),
        Rule::AllowedValues(allowed) => format!(
            "\"{}\" is not an allowed value [{}]",
            to_text(value),
            allowed.iter().map(to_text).collect::<Vec<_>>().join(", ")
        ),
        Rule::AllowedPattern(p) => format!("\"{}\" does not match pattern \"{p}\"", to_text(value)),
        Rule::Custom(_) => String::new(),
    }
}

/// Heat's description of `rule`, without the value (for hidden parameters).
fn rule_text(rule: &Rule) -> String {
    match rule {
        Rule::Length { min, max } | Rule::Range { min, max } => {
            let what = if matches!(rule, Rule::Length { .. }) {
                "length"
            } else {
                "value"
            };
            match (min, max) {
                (Some(_), None) => format!("The {what} must be at least {}.", num(*min)),
                (None, Some(_)) => format!("The {what} must be no greater than {}.", num(*max)),
                _ => format!(
                    "The {what} must be in the range {} to {}.",
                    num(*min),
                    num(*max)
                ),
            }
        }
        Rule::Modulo { step, offset } => format!(
            "The value must be a multiple of {} with an offset of {}.",
            num(Some(*step)),
            num(Some(*offset))
        ),
        Rule::AllowedValues(allowed) => format!(
            "Allowed values: {}",
            allowed.iter().map(to_text).collect::<Vec<_>>().join(", ")
        ),
        Rule::AllowedPattern(p) => format!("Value must match pattern: {p}"),
        Rule::Custom(_) => String::new(),
    }
}
