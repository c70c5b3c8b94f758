//! `OS::Heat::RandomString`: a value made once (usually a password) and kept hidden.
//!
//! The engine keeps nothing secret between runs and a stack record holds no hidden
//! value, so the value is kept where Flue keeps hidden values: the gateway. The
//! resource becomes a small deployment (its *keeper*) on a server of the stack that
//! uses it: the engine generates the value and hands it over as a hidden input, the
//! `script` hook hands it straight back as a hidden output, sealed to the gateway; every
//! deployment that takes `{get_attr: [R, value]}` gets it from there (`input_refs`),
//! as with any hidden output. An update with the same properties re-uses the keeper's
//! inputs (`inputs_from`), so the gateway finds nothing changed and the value stays;
//! other properties make a new value, as in Heat.

use serde_json::{Map, Value, json};

use flue_proto::{ConfigSpec, InputDecl, OutputDecl};

/// The keeper's hook: the value comes in as an input and goes out as an output.
pub const KEEPER_SCRIPT: &str = "#!/bin/sh\n\
# Flue keeps an OS::Heat::RandomString as this deployment's hidden output.\n\
printf '%s' \"$value\" > \"$heat_outputs_path.value\"\n";
/// The input and output holding the value.
pub const VALUE: &str = "value";
/// The input holding the resolved properties the value was made from.
pub const PROPERTIES: &str = "properties";
/// Heat's default length.
pub const DEFAULT_LENGTH: u64 = 32;

/// Why a value could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RandomError {
    /// The properties ask for something impossible.
    #[error("{0}")]
    Invalid(String),
    /// The system's random source failed.
    #[error("the system's random source failed: {0}")]
    Source(String),
}

/// The characters of one of Heat's named classes.
fn class_chars(class: &str) -> Option<&'static str> {
    const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
    const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    Some(match class {
        "lettersdigits" => "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        "letters" => "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "lowercase" => LOWER,
        "uppercase" => UPPER,
        "digits" => "0123456789",
        "hexdigits" => "0123456789abcdefABCDEF",
        "octdigits" => "01234567",
        _ => return None,
    })
}

/// A value for resolved properties `props`, as Heat makes it: at least `min`
/// characters of each class and sequence, the rest from all of them, shuffled.
pub fn generate(props: &Map<String, Value>) -> Result<String, RandomError> {
    let length = match props.get("length") {
        None => DEFAULT_LENGTH,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=super::template::MAX_RANDOM_LENGTH).contains(n))
            .ok_or_else(|| {
                RandomError::Invalid("length must be a whole number from 1 to 512".into())
            })?,
    };
    let length = usize::try_from(length).map_err(|e| RandomError::Invalid(e.to_string()))?;
    let mut pools: Vec<(Vec<char>, usize)> = Vec::new();
    let min_of = |item: &Value| -> Result<usize, RandomError> {
        match item.get("min") {
            None => Ok(1),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    RandomError::Invalid("min must be a whole number, 1 or more".into())
                }),
        }
    };
    for item in props
        .get("character_classes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let class = item
            .get("class")
            .and_then(Value::as_str)
            .unwrap_or("lettersdigits");
        let chars = class_chars(class)
            .ok_or_else(|| RandomError::Invalid(format!("unknown character class {class:?}")))?;
        pools.push((chars.chars().collect(), min_of(item)?));
    }
    for item in props
        .get("character_sequences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let seq = item
            .get("sequence")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if seq.is_empty() {
            return Err(RandomError::Invalid("a character sequence is empty".into()));
        }
        pools.push((seq.chars().collect(), min_of(item)?));
    }
    if pools.is_empty() {
        let class = props
            .get("sequence")
            .and_then(Value::as_str)
            .unwrap_or("lettersdigits");
        let chars = class_chars(class)
            .ok_or_else(|| RandomError::Invalid(format!("unknown sequence {class:?}")))?;
        pools.push((chars.chars().collect(), 0));
    }
    let required: usize = pools.iter().map(|(_, min)| *min).sum();
    if required > length {
        return Err(RandomError::Invalid(format!(
            "the minimums of the character classes and sequences add up to {required}, more than length {length}"
        )));
    }
    let mut all: Vec<char> = pools.iter().flat_map(|(c, _)| c.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    let mut out: Vec<char> = Vec::with_capacity(length);
    for (chars, min) in &pools {
        for _ in 0..*min {
            out.push(chars[below(chars.len())?]);
        }
    }
    while out.len() < length {
        out.push(all[below(all.len())?]);
    }
    // Fisher–Yates, so the required characters are not always first.
    for i in (1..out.len()).rev() {
        out.swap(i, below(i + 1)?);
    }
    Ok(out.into_iter().collect())
}

/// A uniform random number below `n` (rejection sampling, no modulo bias).
fn below(n: usize) -> Result<usize, RandomError> {
    let n = u32::try_from(n).map_err(|e| RandomError::Invalid(e.to_string()))?;
    let zone = u32::MAX - u32::MAX % n;
    loop {
        let r = getrandom::u32().map_err(|e| RandomError::Source(e.to_string()))?;
        if r < zone {
            return usize::try_from(r % n).map_err(|e| RandomError::Invalid(e.to_string()));
        }
    }
}

/// The keeper's config: the value in as a hidden input, out as a hidden output.
pub fn keeper_config(name: &str) -> ConfigSpec {
    let input = |name: &str, kind: &str, hidden: bool| InputDecl {
        name: name.to_owned(),
        kind: kind.to_owned(),
        description: None,
        default: None,
        hidden,
    };
    ConfigSpec {
        id: None,
        name: name.to_owned(),
        group: "script".to_owned(),
        config: Value::String(KEEPER_SCRIPT.to_owned()),
        inputs: vec![
            input(VALUE, "String", true),
            input(PROPERTIES, "Json", false),
        ],
        outputs: vec![OutputDecl {
            name: VALUE.to_owned(),
            kind: "String".to_owned(),
            description: None,
            error_output: false,
            hidden: true,
        }],
        options: json!({}),
        hooks: Default::default(),
        actions: Default::default(),
        substitute_inputs: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("map")
    }

    #[test]
    fn the_default_is_32_letters_and_digits() {
        let v = generate(&Map::new()).expect("value");
        assert_eq!(v.len(), 32);
        assert!(v.chars().all(|c| c.is_ascii_alphanumeric()), "{v}");
        assert_ne!(v, generate(&Map::new()).expect("value"));
    }

    #[test]
    fn each_class_and_sequence_gets_its_minimum() {
        for _ in 0..50 {
            let v = generate(&props(json!({
                "length": 6,
                "character_classes": [{"class": "digits", "min": 2}, {"class": "uppercase", "min": 1}],
                "character_sequences": [{"sequence": "!@", "min": 2}]
            })))
            .expect("value");
            assert_eq!(v.chars().count(), 6);
            assert!(v.chars().filter(char::is_ascii_digit).count() >= 2, "{v}");
            assert!(
                v.chars().filter(char::is_ascii_uppercase).count() >= 1,
                "{v}"
            );
            assert!(v.chars().filter(|c| "!@".contains(*c)).count() >= 2, "{v}");
            assert!(
                v.chars()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase() || "!@".contains(c)),
                "{v}"
            );
        }
        let v = generate(&props(json!({"length": 8, "sequence": "octdigits"}))).expect("value");
        assert!(v.chars().all(|c| ('0'..='7').contains(&c)), "{v}");
    }

    #[test]
    fn minimums_over_the_length_are_refused() {
        let e = generate(&props(json!({
            "length": 2, "character_classes": [{"class": "digits", "min": 3}]
        })))
        .expect_err("too short");
        assert!(e.to_string().contains("more than length 2"), "{e}");
    }
}
