//! Input values as Heat hands them to a hook: typed by the config's declared input type,
//! then the `String` ones made text the way heat-agents' dispatcher (`55-heat-config`)
//! makes them, and, for the built-in `script` group, environment text the way
//! `hook-script.py` writes it.
//!
//! Heat's engine passes a deployment's input values on with the types the template gave
//! them (`get_param` of a `Number` parameter is a number), converting only declared
//! defaults to their input's type. Flue converts every value to its declared type, so a
//! value that arrived as text (`flue deploy --input port=8080`, a stack parameter) reaches
//! a typed hook (Ansible, Puppet) as Heat would have sent it from a typed parameter:
//!
//! | declared | accepted (converted) | refused by [`typed`] |
//! |---|---|---|
//! | `String` | anything, as it is | — |
//! | `Number` | a number; text that reads as one (`" 8080 "`, `"1.5"`) | other text, booleans, lists, maps |
//! | `Boolean` | a boolean; 0 / 1; text Heat reads as one (`true`/`false`, `yes`/`no`, `on`/`off`, `y`/`n`, `t`/`f`, `1`/`0`, any case) | anything else |
//! | `Json` | anything; text that is JSON is parsed | text that is not JSON |
//! | `CommaDelimitedList` | a list; text, split at commas and trimmed | numbers, booleans, maps |
//! | anything else | as it is | — |
//!
//! Null (an input with no value and no default) and `""` stay as they are for every type.
//! Then [`dispatched`] applies the dispatcher's rule to `String` inputs: a value that is
//! not text becomes text (Python's `str()`: `True`, `3`, `1.5`, and `None` for null, as
//! under Heat), maps and lists as JSON where Python would print its own repr.

use serde_json::Value;

pub mod group;

/// The text a `String` input with no value reaches a hook as: Python's `str(None)`, which
/// is what `55-heat-config` makes of Heat's null.
pub const NO_VALUE: &str = "None";

/// The input types Heat's software configs declare (`String` when none is given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputType {
    /// `String`: text; the dispatcher makes any other value text.
    String,
    /// `Number`: a JSON number.
    Number,
    /// `Boolean`: a JSON boolean.
    Boolean,
    /// `Json`: any JSON value.
    Json,
    /// `CommaDelimitedList`: a JSON list.
    CommaDelimitedList,
    /// A name Heat does not know: the value is handed over untouched.
    Other,
}

impl TypeMismatch {
    /// The same mismatch, found at `field`.
    pub fn at(self, field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            ..self
        }
    }
}

impl InputType {
    /// The type named `kind` (an [`crate::InputDecl::kind`]).
    pub fn parse(kind: &str) -> Self {
        match kind {
            "String" => Self::String,
            "Number" => Self::Number,
            "Boolean" => Self::Boolean,
            "Json" => Self::Json,
            "CommaDelimitedList" => Self::CommaDelimitedList,
            _ => Self::Other,
        }
    }

    /// The name as declared.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "String",
            Self::Number => "Number",
            Self::Boolean => "Boolean",
            Self::Json => "Json",
            Self::CommaDelimitedList => "CommaDelimitedList",
            Self::Other => "other",
        }
    }
}

/// A value that cannot be read as its input's declared type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is declared {kind}, but its value is {found}")]
pub struct TypeMismatch {
    /// Where the value is (`input_values.port`, `inputs[2].default`, …).
    pub field: String,
    /// The declared type.
    pub kind: &'static str,
    /// What the value is (`a map`, `text that does not read as one`, …), never the value
    /// itself: it may be hidden.
    pub found: &'static str,
}

/// `value` as its declared type `kind` (see the module table), or why it cannot be.
pub fn typed(kind: InputType, value: &Value) -> Result<Value, TypeMismatch> {
    let converted = match (kind, value) {
        (_, Value::Null) => Some(Value::Null),
        (_, Value::String(s)) if s.is_empty() => Some(value.clone()),
        (InputType::String | InputType::Other, _) => Some(value.clone()),
        (InputType::Number, Value::Number(_)) => Some(value.clone()),
        (InputType::Number, Value::String(s)) => number_from_text(s),
        (InputType::Boolean, Value::Bool(_)) => Some(value.clone()),
        (InputType::Boolean, Value::Number(n)) => match n.as_u64() {
            Some(0) => Some(Value::Bool(false)),
            Some(1) => Some(Value::Bool(true)),
            _ => None,
        },
        (InputType::Boolean, Value::String(s)) => bool_from_text(s).map(Value::Bool),
        (InputType::Json, Value::String(s)) => serde_json::from_str(s).ok(),
        (InputType::Json, _) => Some(value.clone()),
        (InputType::CommaDelimitedList, Value::Array(_)) => Some(value.clone()),
        (InputType::CommaDelimitedList, Value::String(s)) => Some(Value::Array(
            s.split(',')
                .map(|item| Value::String(item.trim().to_owned()))
                .collect(),
        )),
        _ => None,
    };
    converted.ok_or_else(|| TypeMismatch {
        field: String::new(),
        kind: kind.as_str(),
        found: describe(value),
    })
}

/// [`typed`], or the value untouched when it cannot be converted: what the agent hands a
/// hook when a value was not checked (a gateway older than this rule): Heat itself passes
/// values on unchecked.
pub fn typed_or_as_is(kind: InputType, value: &Value) -> Value {
    typed(kind, value).unwrap_or_else(|_| value.clone())
}

/// The value as the dispatcher hands it to the hook: a `String` input's value that is not
/// text becomes text ([`as_text`]), null becoming [`NO_VALUE`] (Python's `str(None)`: a
/// script running `echo $foo >> /tmp/$bar` with neither set writes `None` to `/tmp/None`,
/// as under Heat); every other type's value is left as it is, null included.
pub fn dispatched(kind: InputType, value: Value) -> Value {
    match (kind, value) {
        (InputType::String, Value::String(s)) => Value::String(s),
        (InputType::String, Value::Null) => Value::String(NO_VALUE.to_owned()),
        (InputType::String, other) => Value::String(as_text(&other)),
        (_, other) => other,
    }
}

/// An input's declared `default` as Heat's item carries it: absent when there is none
/// (or it is null), else typed as declared, a `String`'s made text as Heat's engine makes
/// it (`true` → `True`).
pub fn item_default(kind: InputType, default: Option<&Value>) -> Option<Value> {
    let default = default.filter(|v| !v.is_null())?;
    Some(dispatched(kind, typed_or_as_is(kind, default)))
}

/// A value made text as Heat (Python) makes it: Python's `str()` for scalars (`True`,
/// `False`, `3`, `1.5`, `1e+16`); JSON (as Python's `json.dumps` writes it) for lists and
/// maps, where Python would write its own repr (`{'a': 1}`), which only Python reads;
/// `""` for null, as Heat's `str_replace` splices it. (The dispatcher's `String` input
/// with no value is [`NO_VALUE`] instead: [`dispatched`].)
pub fn as_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Array(_) | Value::Object(_) => python_json(value),
    }
}

/// The environment variable the built-in `script` group sets for an input, as
/// heat-agents' `hook-script.py` sets it: text as it is (a `String` input with no value
/// is already [`NO_VALUE`]), lists and maps as Python's `json.dumps` writes them. A
/// number, boolean or null of another type (which `hook-script.py` cannot put in the
/// environment: it stops with a `TypeError`) is written as JSON too (`8080`, `true`),
/// null as `""`.
pub fn env_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => python_json(other),
    }
}

/// `value` as Python's `json.dumps(value)` writes it: `", "` and `": "` between items,
/// every character outside printable ASCII escaped (`ensure_ascii`), floats as Python's
/// `repr`. Map keys come in serde_json's order (sorted), where Python keeps the order
/// the document had.
pub fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(&mut out, value);
    out
}

fn write_python_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (None, Some(u), _) => out.push_str(&u.to_string()),
            (None, None, Some(f)) => out.push_str(&python_float(f)),
            (None, None, None) => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_python_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_string(out, key);
                out.push_str(": ");
                write_python_json(out, item);
            }
            out.push('}');
        }
    }
}

/// A JSON string as `json.dumps` writes it with `ensure_ascii`: only `' '..='~'` as is.
fn write_python_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it: the shortest digits that read back, positional
/// for decimal exponents from -4 to 15 (`0.0001`, `1.5`, `100.0`), scientific otherwise
/// (`1e-05`, `1e+16`, `1.5e+300`).
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    // Rust's `{:e}` gives the same shortest digits as Python: `1.5e0`, `-1e-5`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (whole, frac) = digits.split_at(point as usize);
            format!("{whole}.{frac}")
        };
        format!("{sign}{text}")
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() {
            first.to_owned()
        } else {
            format!("{first}.{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.unsigned_abs())
    }
}

/// Text that reads as a number (surrounding blanks allowed, as Python's `int()` and
/// `float()` allow them): an integer when it is one, else a finite float.
fn number_from_text(s: &str) -> Option<Value> {
    let t = s.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Some(Value::from(i));
    }
    if let Ok(u) = t.parse::<u64>() {
        return Some(Value::from(u));
    }
    // Rust reads "inf" and "nan", which JSON cannot carry.
    let f = t.parse::<f64>().ok().filter(|f| f.is_finite())?;
    serde_json::Number::from_f64(f).map(Value::Number)
}

/// Heat's reading of a boolean parameter (oslo's `bool_from_string`, strict).
fn bool_from_text(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// What a value is, for a [`TypeMismatch`]: its kind only, never its content.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text that does not read as one",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

#[cfg(test)]
mod tests;
