//! Conditions (HOT 2016-10-14 and later): the `conditions` section, a resource's or an
//! output's `condition`, and `if`'s first argument. They only read parameters, so they
//! are decided once the parameters are bound, before anything runs (as Heat decides
//! them when it parses a stack).
//!
//! A condition is `true`/`false`, the name of another condition, or an expression of
//! `equals`, `not`, `and`, `or`, `get_param` (a boolean parameter), `contains`
//! (2017-09-01) and `if` (2021-04-16). Inside `not`, `and` and `or`, a string names a
//! condition; inside `equals` and `contains` it is a value.

use std::collections::BTreeMap;

use serde_json::Value;

use super::versions::{TemplateVersion, condition_function_since, not_in_version};
use super::{GET_PARAM, Resolver, data, kind_of, select};

/// `if` (also a function outside the conditions section).
pub const IF: &str = "if";

/// Decides conditions against bound parameters; each named one is evaluated once.
pub struct Conditions<'a> {
    defs: &'a BTreeMap<String, Value>,
    params: &'a dyn Resolver,
    version: TemplateVersion,
    decided: BTreeMap<String, bool>,
    /// Names being evaluated, to report a definition that refers to itself.
    stack: Vec<String>,
}

impl<'a> Conditions<'a> {
    /// An evaluator for the `conditions` section `defs`.
    pub fn new(
        defs: &'a BTreeMap<String, Value>,
        params: &'a dyn Resolver,
        version: TemplateVersion,
    ) -> Self {
        Self {
            defs,
            params,
            version,
            decided: BTreeMap::new(),
            stack: Vec::new(),
        }
    }

    /// Every named condition's value (all are evaluated, so a broken one is reported
    /// even if nothing uses it, as Heat does).
    pub fn decide_all(&mut self) -> Result<BTreeMap<String, bool>, String> {
        for name in self.defs.keys() {
            self.named(name)?;
        }
        Ok(self.decided.clone())
    }

    /// The value of a `condition:` key or of `if`'s first argument: a boolean, a
    /// condition's name, or an expression.
    pub fn is_enabled(&mut self, condition: &Value) -> Result<bool, String> {
        self.condition(condition)
    }

    fn named(&mut self, name: &str) -> Result<bool, String> {
        if let Some(v) = self.decided.get(name) {
            return Ok(*v);
        }
        let Some(def) = self.defs.get(name) else {
            return Err(format!("Invalid condition \"{name}\""));
        };
        if self.stack.iter().any(|n| n == name) {
            return Err(format!("Circular definition for condition \"{name}\""));
        }
        self.stack.push(name.to_owned());
        let result = self
            .condition(def)
            .map_err(|e| format!("conditions.{name}: {e}"));
        self.stack.pop();
        let value = result?;
        self.decided.insert(name.to_owned(), value);
        Ok(value)
    }

    fn condition(&mut self, v: &Value) -> Result<bool, String> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::String(name) => self.named(name),
            _ => match self.call(v)? {
                Value::Bool(b) => Ok(b),
                other => Err(format!(
                    "a condition must be a boolean, got {}",
                    kind_of(&other)
                )),
            },
        }
    }

    /// A function call inside a condition.
    fn call(&mut self, v: &Value) -> Result<Value, String> {
        let Some((name, args)) = one_key(v) else {
            return Err(format!(
                "a condition must be true, false, a condition name or a condition function, got {}",
                kind_of(v)
            ));
        };
        let Some(since) = condition_function_since(name) else {
            return Err(format!(
                "The function \"{name}\" is invalid in this context"
            ));
        };
        if self.version < since {
            return Err(not_in_version(name, self.version, since));
        }
        let fail = |m: String| format!("{name}: {m}");
        match name {
            "equals" => {
                let args = self.value(args)?;
                data::equals(&args).map(Value::Bool).map_err(fail)
            }
            "contains" => {
                let args = self.value(args)?;
                data::contains(&args).map(Value::Bool).map_err(fail)
            }
            "not" => Ok(Value::Bool(!self.condition(args)?)),
            "and" | "or" => {
                let items = match args {
                    Value::Array(items) if items.len() >= 2 => items,
                    _ => {
                        return Err(fail(format!(
                            "expected a list of at least 2 conditions, got {}",
                            kind_of(args)
                        )));
                    }
                };
                let mut all = true;
                let mut any = false;
                for item in items {
                    let c = self.condition(item)?;
                    all &= c;
                    any |= c;
                }
                Ok(Value::Bool(if name == "and" { all } else { any }))
            }
            GET_PARAM => self.get_param(args).map_err(fail),
            IF => {
                let Some([cond, yes, no]) = args.as_array().map(Vec::as_slice) else {
                    return Err(fail(
                        "expected [condition, value_if_true, value_if_false]".to_owned(),
                    ));
                };
                let chosen = if self.condition(cond)? { yes } else { no };
                self.value(chosen)
            }
            _ => Err("yaql is not supported by Flue".to_owned()),
        }
    }

    /// A value inside `equals` or `contains`: data, with calls evaluated.
    fn value(&mut self, v: &Value) -> Result<Value, String> {
        if one_key(v).is_some_and(|(n, _)| is_condition_call_name(n)) {
            return self.call(v);
        }
        match v {
            Value::Array(items) => items
                .iter()
                .map(|i| self.value(i))
                .collect::<Result<_, _>>()
                .map(Value::Array),
            Value::Object(map) => {
                if let Some((name, _)) = one_key(v)
                    && super::versions::function_since(name).is_some()
                {
                    return Err(format!(
                        "The function \"{name}\" is invalid in this context"
                    ));
                }
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.value(v)?)))
                    .collect::<Result<_, String>>()
                    .map(Value::Object)
            }
            other => Ok(other.clone()),
        }
    }

    fn get_param(&mut self, args: &Value) -> Result<Value, String> {
        let args = self.value(args)?;
        let (name, path) = match &args {
            Value::String(p) => (p.as_str(), &[][..]),
            Value::Array(items) => match items.split_first() {
                Some((Value::String(p), path)) => (p.as_str(), path),
                _ => return Err("expected [parameter name, key…]".to_owned()),
            },
            other => return Err(format!("expected a parameter name, got {}", kind_of(other))),
        };
        let value = self
            .params
            .param(name)
            .ok_or_else(|| format!("parameter {name:?} does not exist"))?;
        select(value, path).map_err(|e| format!("parameter {name:?}: {e}"))
    }
}

fn is_condition_call_name(name: &str) -> bool {
    condition_function_since(name).is_some()
}

fn one_key(v: &Value) -> Option<(&str, &Value)> {
    let map = v.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// Replaces every `if` inside `value` by the branch its condition picks.
pub fn choose_branches(
    value: &Value,
    conditions: &mut Conditions<'_>,
    path: &str,
) -> Result<Value, (String, String)> {
    if let Some((IF, args)) = one_key(value) {
        // Two arguments (2021-04-16): a false condition gives null, which leaves a
        // property unset.
        let (cond, yes, no) = match args.as_array().map(Vec::as_slice) {
            Some([cond, yes, no]) => (cond, yes, no),
            Some([cond, yes]) => (cond, yes, &Value::Null),
            _ => {
                return Err((
                    path.to_owned(),
                    "if: expected [condition, value_if_true, value_if_false]".to_owned(),
                ));
            }
        };
        let enabled = conditions
            .is_enabled(cond)
            .map_err(|e| (path.to_owned(), format!("if: {e}")))?;
        let chosen = if enabled { yes } else { no };
        return choose_branches(chosen, conditions, path);
    }
    match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| choose_branches(v, conditions, &format!("{path}[{i}]")))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                Ok((
                    k.clone(),
                    choose_branches(v, conditions, &format!("{path}.{k}"))?,
                ))
            })
            .collect::<Result<_, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}
