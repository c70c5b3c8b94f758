//! Strings made from values: how a value reads once spliced into a string (Heat's
//! Python spelling), and `str_replace`'s substitution.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Text for a value spliced into a string, as Heat (Python) writes it for
/// `str_replace` and `list_join`: strings as they are, null as nothing, booleans as
/// `True` / `False`, numbers as they are, maps and lists as `json.dumps(value,
/// sort_keys=True)` writes them (`{"a": [1, "b"]}`, non-ASCII as `\uXXXX`).
pub fn to_text(value: &Value) -> String {
    // The same rule as the dispatcher's for a `String` input (`flue_proto::heat`).
    flue_proto::heat::as_text(value)
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
