//! The functions Heat added after 2013-05-23, each with the examples of Heat's HOT
//! specification, plus versions and conditions.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::conditions::Conditions;
use super::data::{self, Strictness};
use super::versions::{TemplateVersion, condition_function_since, function_since};
use super::{Resolver, resolve};

struct Params(BTreeMap<String, Value>);

impl Resolver for Params {
    fn param(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }
    fn param_hidden(&self, _: &str) -> bool {
        false
    }
    fn get_resource(&self, name: &str) -> Result<Value, String> {
        Ok(Value::from(name))
    }
    fn get_attr(&self, _: &str, _: &str, _: &[Value]) -> Result<Value, String> {
        Ok(Value::Null)
    }
}

fn params(pairs: &[(&str, Value)]) -> Params {
    Params(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    )
}

fn eval(v: Value) -> Value {
    resolve(&v, &params(&[("env", json!("prod"))]), "x")
        .expect("resolves")
        .value
}

#[test]
fn str_split_gives_the_list_or_one_item() {
    assert_eq!(
        eval(json!({"str_split": [",", "string,to,split"]})),
        json!(["string", "to", "split"])
    );
    assert_eq!(
        eval(json!({"str_split": [",", "string,to,split", 1]})),
        json!("to")
    );
    assert_eq!(eval(json!({"str_split": [",", "a,b", "-1"]})), json!("b"));
    let e = data::str_split(&json!([",", "a,b", 5])).expect_err("out of range");
    assert!(e.contains("between 0 and 1"), "{e}");
}

#[test]
fn map_merge_lets_later_maps_win() {
    assert_eq!(
        eval(json!({"map_merge": [{"k1": "v1", "k2": "v2"}, {"k1": "v2"}, null]})),
        json!({"k1": "v2", "k2": "v2"})
    );
    assert!(data::map_merge(&json!([{"a": 1}, [1]])).is_err());
}

#[test]
fn map_replace_renames_keys_and_replaces_values() {
    assert_eq!(
        eval(json!({"map_replace": [
            {"k1": "v1", "k2": "v2"},
            {"keys": {"k1": "K1"}, "values": {"v2": "V2"}}
        ]})),
        json!({"K1": "v1", "k2": "V2"})
    );
    let e =
        data::map_replace(&json!([{"a": 1, "b": 2}, {"keys": {"a": "b"}}])).expect_err("collides");
    assert!(e.contains("collides with a key in the input map"), "{e}");
}

#[test]
fn repeat_makes_every_permutation_or_walks_lists_side_by_side() {
    assert_eq!(
        eval(json!({"repeat": {
            "for_each": {"<%port%>": ["80", "443"], "<%cidr%>": ["10.0.0.0/24"]},
            "template": {"protocol": "tcp", "port": "<%port%>", "cidr": "<%cidr%>"}
        }})),
        json!([
            {"protocol": "tcp", "port": "80", "cidr": "10.0.0.0/24"},
            {"protocol": "tcp", "port": "443", "cidr": "10.0.0.0/24"}
        ])
    );
    assert_eq!(
        eval(json!({"repeat": {
            "for_each": {"%a%": ["1", "2"], "%b%": ["x", "y"]},
            "template": "%a%-%b%",
            "permutations": false
        }})),
        json!(["1-x", "2-y"])
    );
    assert_eq!(
        eval(json!({"repeat": {"for_each": {"%k%": {"one": 1, "two": 2}}, "template": "%k%"}})),
        json!(["one", "two"])
    );
    let e = data::repeat(&json!({
        "for_each": {"%a%": ["1"], "%b%": ["x", "y"]}, "template": "", "permutations": false
    }))
    .expect_err("lengths differ");
    assert!(e.contains("same length"), "{e}");
}

#[test]
fn list_concat_and_its_unique_variant() {
    assert_eq!(
        eval(json!({"list_concat": [["v1", "v2"], ["v3", "v4"]]})),
        json!(["v1", "v2", "v3", "v4"])
    );
    assert_eq!(
        eval(json!({"list_concat_unique": [["v1", "v2"], ["v2", "v3"]]})),
        json!(["v1", "v2", "v3"])
    );
    // Heat keeps each value at its last place.
    assert_eq!(
        eval(json!({"list_concat_unique": [["a", "b"], ["a"]]})),
        json!(["b", "a"])
    );
}

#[test]
fn contains_filter_and_digest() {
    assert_eq!(eval(json!({"contains": ["b", ["a", "b"]]})), json!(true));
    assert_eq!(eval(json!({"contains": ["c", ["a", "b"]]})), json!(false));
    assert_eq!(eval(json!({"filter": [[3], [1, 2, 3, 3]]})), json!([1, 2]));
    assert_eq!(
        eval(json!({"digest": ["sha256", "abc"]})),
        json!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    );
    assert_eq!(
        eval(json!({"digest": ["md5", "abc"]})),
        json!("900150983cd24fb0d6963f7d28e17f72")
    );
    let e = data::digest(&json!(["sha224", "abc"])).expect_err("sha224");
    assert!(e.contains("not supported by Flue"), "{e}");
}

#[test]
fn strict_str_replace_refuses_missing_and_empty_params() {
    let params = json!({"$a": "1", "$b": "2"});
    let p = params.as_object().expect("map");
    assert_eq!(
        data::str_replace_checked("$a $b", p, Strictness::Strict),
        Ok(json!("1 2"))
    );
    let e = data::str_replace_checked("$a", p, Strictness::Strict).expect_err("missing");
    assert_eq!(e, "The following params were not found in the template: $b");
    let empty = json!({"$a": ""});
    let e = data::str_replace_checked(
        "$a",
        empty.as_object().expect("map"),
        Strictness::VeryStrict,
    )
    .expect_err("empty");
    assert!(e.contains("undefined or empty value for param $a"), "{e}");
    assert_eq!(
        eval(json!({"str_replace_strict": {"template": "x=$a", "params": {"$a": 1}}})),
        json!("x=1")
    );
}

#[test]
fn versions_accept_dates_and_release_names_and_date_each_function() {
    assert_eq!(
        TemplateVersion::parse("pike"),
        TemplateVersion::parse("2017-09-01")
    );
    assert_eq!(
        TemplateVersion::parse("wallaby").expect("known").date(),
        "2021-04-16"
    );
    let e = TemplateVersion::parse("2012-12-12").expect_err("unknown");
    assert!(e.starts_with("The template version is invalid"), "{e}");
    assert!(e.contains("newton"), "{e}");
    assert_eq!(
        function_since("map_merge"),
        Some(TemplateVersion::V2016_04_08)
    );
    assert_eq!(function_since("list_concat"), Some(TemplateVersion::PIKE));
    assert_eq!(function_since("equals"), None);
    assert_eq!(
        condition_function_since("if"),
        Some(TemplateVersion::WALLABY)
    );
}

#[test]
fn conditions_combine_names_functions_and_parameters() {
    let defs: BTreeMap<String, Value> = [
        ("is_prod", json!({"equals": [{"get_param": "env"}, "prod"]})),
        ("not_prod", json!({"not": "is_prod"})),
        (
            "both",
            json!({"and": ["is_prod", {"contains": ["a", ["a", "b"]]}]}),
        ),
        ("either", json!({"or": ["not_prod", false]})),
        ("flag", json!({"get_param": "flag"})),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let p = params(&[("env", json!("prod")), ("flag", json!(true))]);
    let mut c = Conditions::new(&defs, &p, TemplateVersion::LATEST);
    let all = c.decide_all().expect("decided");
    assert!(all["is_prod"]);
    assert!(!all["not_prod"]);
    assert!(all["both"]);
    assert!(!all["either"]);
    assert!(all["flag"]);
    assert_eq!(
        c.is_enabled(&json!("nope")),
        Err("Invalid condition \"nope\"".to_owned())
    );
}

#[test]
fn a_condition_that_refers_to_itself_or_uses_yaql_is_refused() {
    let defs: BTreeMap<String, Value> = [("a", json!({"not": "b"})), ("b", json!({"not": "a"}))]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let p = params(&[]);
    let e = Conditions::new(&defs, &p, TemplateVersion::LATEST)
        .decide_all()
        .expect_err("circular");
    assert!(e.contains("Circular definition for condition \"a\""), "{e}");
    let defs: BTreeMap<String, Value> = [("y", json!({"yaql": {"expression": "1"}}))]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let e = Conditions::new(&defs, &p, TemplateVersion::LATEST)
        .decide_all()
        .expect_err("yaql");
    assert!(e.contains("yaql is not supported by Flue"), "{e}");
    let defs: BTreeMap<String, Value> = [("c", json!({"contains": ["a", ["a"]]}))]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let e = Conditions::new(&defs, &p, TemplateVersion::NEWTON)
        .decide_all()
        .expect_err("contains needs pike");
    assert!(
        e.contains("The function contains is not supported in this version of HOT"),
        "{e}"
    );
}

#[test]
fn values_spliced_into_strings_read_as_heat_writes_them() {
    assert_eq!(super::to_text(&json!(true)), "True");
    assert_eq!(super::to_text(&json!(null)), "");
    assert_eq!(
        super::to_text(&json!({"b": ["ü", 1.5, false], "a": "x\"y"})),
        r#"{"a": "x\"y", "b": ["\u00fc", 1.5, false]}"#
    );
}
