//! The functions that only reshape values, each on its already resolved argument,
//! with Heat's semantics (`heat/engine/hot/functions.py`): `str_split`, `map_merge`,
//! `map_replace`, `repeat`, `list_concat(_unique)`, `contains`, `equals`, `filter`,
//! `digest` and the strict `str_replace` variants.

use data_encoding::HEXLOWER;
use serde_json::{Map, Value};

use super::{kind_of, str_replace_counting, to_text};

/// `str_split: [delimiter, string, index?]`: the pieces, or the one at `index`
/// (negative counts from the end, as in Python). A null string gives null.
pub fn str_split(args: &Value) -> Result<Value, String> {
    let usage = "expected [delimiter, string] or [delimiter, string, index]";
    let Some(items) = args.as_array().filter(|a| (2..=3).contains(&a.len())) else {
        return Err(usage.to_owned());
    };
    let Value::String(delim) = &items[0] else {
        return Err(format!(
            "the delimiter must be a string, got {}",
            kind_of(&items[0])
        ));
    };
    if delim.is_empty() {
        return Err("the delimiter must not be empty".to_owned());
    }
    let text = match &items[1] {
        Value::Null => return Ok(Value::Null),
        Value::String(s) => s,
        other => return Err(format!("can only split a string, got {}", kind_of(other))),
    };
    let pieces: Vec<Value> = text.split(delim.as_str()).map(Value::from).collect();
    let Some(index) = items.get(2) else {
        return Ok(Value::Array(pieces));
    };
    let index = match index {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("the index must be an integer, got {}", kind_of(index)))?;
    let len = i64::try_from(pieces.len()).unwrap_or(i64::MAX);
    let at = if index < 0 { len + index } else { index };
    usize::try_from(at)
        .ok()
        .and_then(|i| pieces.get(i).cloned())
        .ok_or_else(|| {
            format!(
                "index {index} is out of range: it should be between 0 and {}",
                len - 1
            )
        })
}

/// `map_merge: [map, map, …]`: later keys win; a null counts as an empty map.
pub fn map_merge(args: &Value) -> Result<Value, String> {
    let Value::Array(maps) = args else {
        return Err(format!("expected a list of maps, got {}", kind_of(args)));
    };
    let mut out = Map::new();
    for m in maps {
        match m {
            Value::Null => {}
            Value::Object(m) => out.extend(m.iter().map(|(k, v)| (k.clone(), v.clone()))),
            other => {
                return Err(format!(
                    "items to merge must be maps, got {}",
                    kind_of(other)
                ));
            }
        }
    }
    Ok(Value::Object(out))
}

/// `map_replace: [map, {keys: {old: new}, values: {old: new}}]`: renames keys and
/// replaces (string) values; a renamed key may not collide with another key.
pub fn map_replace(args: &Value) -> Result<Value, String> {
    let usage = "expected [map, {keys: {old: new}, values: {old: new}}]";
    let Some([input, replace]) = args.as_array().map(Vec::as_slice) else {
        return Err(usage.to_owned());
    };
    let as_map = |v: &Value| -> Result<Map<String, Value>, String> {
        match v {
            Value::Null => Ok(Map::new()),
            Value::Object(m) => Ok(m.clone()),
            _ => Err(usage.to_owned()),
        }
    };
    let input = as_map(input)?;
    let replace = as_map(replace)?;
    if let Some(k) = replace.keys().find(|k| *k != "keys" && *k != "values") {
        return Err(format!("unknown key {k:?}; {usage}"));
    }
    let keys = as_map(replace.get("keys").unwrap_or(&Value::Null))?;
    let values = as_map(replace.get("values").unwrap_or(&Value::Null))?;
    let mut out = Map::new();
    for (k, v) in &input {
        let key = match keys.get(k) {
            None | Some(Value::Null) => k.clone(),
            Some(new) => {
                let new = to_text(new);
                if input.contains_key(&new) && new != *k {
                    return Err(format!(
                        "key replacement {new} collides with a key in the input map"
                    ));
                }
                if out.contains_key(&new) {
                    return Err(format!(
                        "key replacement {new} collides with a key in the output map"
                    ));
                }
                new
            }
        };
        // Only a string can be a key of `values` (Heat looks the value up as is).
        let value = match v {
            Value::String(s) => values.get(s).cloned().unwrap_or_else(|| v.clone()),
            _ => v.clone(),
        };
        out.insert(key, value);
    }
    Ok(Value::Object(out))
}

/// `repeat: {for_each: {var: list-or-map, …}, template: …, permutations: bool}`:
/// one copy of `template` per combination (every combination by default, the lists
/// side by side with `permutations: false`), each variable replaced in every string.
/// A map stands for its keys. Variables are taken in name order (Flue reads maps
/// sorted, where Heat keeps the template's order).
pub fn repeat(args: &Value) -> Result<Value, String> {
    let usage = "expected {for_each: {<var>: <list>}, template: <body>}";
    let Value::Object(args) = args else {
        return Err(usage.to_owned());
    };
    let (Some(for_each), Some(template)) = (args.get("for_each"), args.get("template")) else {
        return Err(usage.to_owned());
    };
    let permutations = match args.get("permutations") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "permutations must be true or false, got {}",
                kind_of(other)
            ));
        }
    };
    let Value::Object(for_each) = for_each else {
        return Err(format!("for_each must be a map, got {}", kind_of(for_each)));
    };
    let mut vars = Vec::new();
    let mut lists: Vec<Vec<String>> = Vec::new();
    for (var, values) in for_each {
        let items: Vec<String> = match values {
            Value::Null => Vec::new(),
            Value::Array(items) => items.iter().map(to_text).collect(),
            Value::Object(map) if permutations => map.keys().cloned().collect(),
            other => {
                return Err(format!(
                    "the values of for_each must be lists{}, got {} for {var}",
                    if permutations { " or maps" } else { "" },
                    kind_of(other)
                ));
            }
        };
        vars.push(var.as_str());
        lists.push(items);
    }
    let rows: Vec<Vec<&str>> = if permutations {
        let mut rows: Vec<Vec<&str>> = vec![Vec::new()];
        for list in &lists {
            rows = rows
                .iter()
                .flat_map(|row| {
                    list.iter().map(move |item| {
                        let mut r = row.clone();
                        r.push(item.as_str());
                        r
                    })
                })
                .collect();
        }
        rows
    } else {
        let len = lists.first().map_or(0, Vec::len);
        if lists.iter().any(|l| l.len() != len) {
            return Err(
                "the lists of for_each must have the same length when permutations is false"
                    .to_owned(),
            );
        }
        (0..len)
            .map(|i| lists.iter().map(|l| l[i].as_str()).collect())
            .collect()
    };
    Ok(Value::Array(
        rows.iter()
            .map(|row| substitute(template, &vars, row))
            .collect(),
    ))
}

/// `template` with each of `vars` replaced by the matching item of `row`, in keys and
/// values alike.
fn substitute(template: &Value, vars: &[&str], row: &[&str]) -> Value {
    let text = |s: &str| {
        vars.iter()
            .zip(row)
            .fold(s.to_owned(), |acc, (var, item)| acc.replace(var, item))
    };
    match template {
        Value::String(s) => Value::String(text(s)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| substitute(v, vars, row)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (text(k), substitute(v, vars, row)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `list_concat: [list, list, …]` (nulls count as empty lists); with `unique`, each
/// value appears once, at its last place (as Heat's `list_concat_unique` leaves it).
pub fn list_concat(args: &Value, unique: bool) -> Result<Value, String> {
    let Value::Array(lists) = args else {
        return Err(format!("expected a list of lists, got {}", kind_of(args)));
    };
    let mut out = Vec::new();
    for l in lists {
        match l {
            Value::Null => {}
            Value::Array(items) => out.extend(items.iter().cloned()),
            other => {
                return Err(format!(
                    "items to concat must be lists, got {}",
                    kind_of(other)
                ));
            }
        }
    }
    if unique {
        let mut kept = Vec::with_capacity(out.len());
        for (i, v) in out.iter().enumerate() {
            if !out[i + 1..].iter().any(|later| same(later, v)) {
                kept.push(v.clone());
            }
        }
        out = kept;
    }
    Ok(Value::Array(out))
}

/// Equality as Heat (Python) sees it: numbers by value, so `1` equals `1.0`.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// `equals: [a, b]`.
pub fn equals(args: &Value) -> Result<bool, String> {
    match args.as_array().map(Vec::as_slice) {
        Some([a, b]) => Ok(same(a, b)),
        _ => Err("expected [value_1, value_2]".to_owned()),
    }
}

/// `contains: [value, sequence]`: membership in a list, or a substring of a string.
pub fn contains(args: &Value) -> Result<bool, String> {
    let Some([value, sequence]) = args.as_array().map(Vec::as_slice) else {
        return Err("expected [value, [value1, value2, …]]".to_owned());
    };
    match (sequence, value) {
        (Value::Array(items), _) => Ok(items.iter().any(|i| same(i, value))),
        (Value::String(s), Value::String(v)) => Ok(s.contains(v.as_str())),
        _ => Err(format!(
            "the second argument should be a sequence, got {}",
            kind_of(sequence)
        )),
    }
}

/// `filter: [values, list]`: the list without the values.
pub fn filter(args: &Value) -> Result<Value, String> {
    let Some([values, sequence]) = args.as_array().map(Vec::as_slice) else {
        return Err("expected [values, list]".to_owned());
    };
    let items = match sequence {
        Value::Null => return Ok(Value::Null),
        Value::Array(items) => items,
        other => return Err(format!("only works with lists, got {}", kind_of(other))),
    };
    let values = match values {
        Value::Null => return Ok(sequence.clone()),
        Value::Array(v) => v,
        other => return Err(format!("filters a list of values, got {}", kind_of(other))),
    };
    Ok(Value::Array(
        items
            .iter()
            .filter(|i| !values.iter().any(|v| same(v, i)))
            .cloned()
            .collect(),
    ))
}

/// The algorithms `digest` offers (Heat's, but sha224).
pub const DIGEST_ALGORITHMS: [&str; 5] = ["md5", "sha1", "sha256", "sha384", "sha512"];

/// `digest: [algorithm, value]`: the hex digest of the value's UTF-8 bytes.
pub fn digest(args: &Value) -> Result<Value, String> {
    let Some([Value::String(algorithm), Value::String(value)]) = args.as_array().map(Vec::as_slice)
    else {
        return Err("expected [\"<algorithm>\", \"<value>\"], both strings".to_owned());
    };
    let hex = |bytes: &[u8]| HEXLOWER.encode(bytes);
    let algorithm_ref = match algorithm.to_ascii_lowercase().as_str() {
        "md5" => {
            use md5::Digest as _;
            return Ok(Value::String(hex(&md5::Md5::digest(value.as_bytes()))));
        }
        "sha1" => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        "sha256" => &ring::digest::SHA256,
        "sha384" => &ring::digest::SHA384,
        "sha512" => &ring::digest::SHA512,
        _ => {
            return Err(format!(
                "algorithm {algorithm:?} is not supported by Flue; it must be one of {}",
                DIGEST_ALGORITHMS.join(", ")
            ));
        }
    };
    let d = ring::digest::digest(algorithm_ref, value.as_bytes());
    Ok(Value::String(hex(d.as_ref())))
}

/// How strictly `str_replace` treats its params.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// `str_replace_strict`: every param must occur in the template.
    Strict,
    /// `str_replace_vstrict`: and no param may be null or empty.
    VeryStrict,
}

/// `str_replace_strict` and `str_replace_vstrict` on `{template, params}`.
pub fn str_replace_checked(
    template: &str,
    params: &Map<String, Value>,
    strictness: Strictness,
) -> Result<Value, String> {
    if strictness == Strictness::VeryStrict
        && let Some((k, _)) = params
            .iter()
            .find(|(_, v)| v.is_null() || v.as_str() == Some(""))
    {
        return Err(format!(
            "has an undefined or empty value for param {k}, must be a defined non-empty value"
        ));
    }
    let (text, found) = str_replace_counting(template, params);
    let mut missing: Vec<&str> = params
        .keys()
        .map(String::as_str)
        .filter(|k| !found.contains(k))
        .collect();
    if !missing.is_empty() {
        missing.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        return Err(format!(
            "The following params were not found in the template: {}",
            missing.join(",")
        ));
    }
    Ok(Value::String(text))
}
