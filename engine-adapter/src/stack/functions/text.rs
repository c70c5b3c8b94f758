//! Strings made from values: how a value reads once spliced into a string (Heat's
//! Python spelling), and `str_replace`'s substitution.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Text for a value spliced into a string, as Heat (Python) writes it for
/// `str_replace` and `list_join`: strings as they are, null as nothing, booleans as
/// `True` / `False`, numbers as they are, maps and lists as `json.dumps(value,
/// sort_keys=True)` writes them (`{"a": [1, "b"]}`, non-ASCII as `\uXXXX`).
pub fn to_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        other => {
            let mut out = String::new();
            python_json(other, &mut out);
            out
        }
    }
}

/// `json.dumps` with Python's defaults: `", "` and `": "` separators, ASCII only.
/// Maps are already sorted by key (serde_json's map is ordered).
fn python_json(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
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
                    c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
                    c => {
                        let mut units = [0u16; 2];
                        for u in c.encode_utf16(&mut units) {
                            out.push_str(&format!("\\u{u:04x}"));
                        }
                    }
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(v, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(&Value::String(k.clone()), out);
                out.push_str(": ");
                python_json(v, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Replaces each key of `params` in `template` by its value, longest key first at each
/// position; replaced text is not searched again.
pub fn str_replace(template: &str, params: &Map<String, Value>) -> String {
    str_replace_counting(template, params).0
}

/// [`str_replace`], also returning the keys that replaced something (for the strict
/// variants).
pub fn str_replace_counting<'p>(
    template: &str,
    params: &'p Map<String, Value>,
) -> (String, BTreeSet<&'p str>) {
    let mut found = BTreeSet::new();
    let mut keys: Vec<(&str, String)> = params
        .iter()
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.as_str(), to_text(v)))
        .collect();
    keys.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    'scan: while let Some(c) = rest.chars().next() {
        for (key, text) in &keys {
            if let Some(after) = rest.strip_prefix(key) {
                found.insert(*key);
                out.push_str(text);
                rest = after;
                continue 'scan;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    (out, found)
}
