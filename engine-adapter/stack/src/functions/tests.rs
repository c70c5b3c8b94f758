use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::*;

/// A scratch directory removed on drop (the crate has no tempfile dependency).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("flue-fn-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Parameters `name`, `port`, `net` (json), `secret` (hidden); resources answer with
/// made-up values.
struct Fake {
    params: BTreeMap<String, Value>,
    hidden: BTreeSet<String>,
}

fn fake() -> Fake {
    Fake {
        params: [
            ("name", json!("web")),
            ("port", json!(8080)),
            (
                "net",
                json!({"cidr": "10.0.0.0/24", "dns": ["1.1.1.1", "8.8.8.8"]}),
            ),
            ("secret", json!("s3cr3t")),
            ("which", json!("dns")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        hidden: BTreeSet::from(["secret".to_owned()]),
    }
}

impl Resolver for Fake {
    fn param(&self, name: &str) -> Option<&Value> {
        self.params.get(name)
    }

    fn param_hidden(&self, name: &str) -> bool {
        self.hidden.contains(name)
    }

    fn get_resource(&self, name: &str) -> Result<Value, String> {
        match name {
            "srv" => Ok(json!("server-1")),
            _ => Err(format!("resource {name:?} has no value yet")),
        }
    }

    fn get_attr(&self, resource: &str, attr: &str, path: &[Value]) -> Result<Value, String> {
        match (resource, attr) {
            ("db", "host") => select(&json!("10.0.0.5"), path),
            ("db", "info") => select(&json!({"ports": [5432, 5433], "dns": "db.local"}), path),
            _ => Err(format!("resource {resource:?} has no attribute {attr:?}")),
        }
    }
}

fn ok(v: Value) -> Resolved {
    resolve(&v, &fake(), "x").expect("resolves")
}

fn err(v: Value) -> String {
    resolve(&v, &fake(), "resources.r.properties.p")
        .expect_err("refused")
        .to_string()
}

#[test]
fn a_call_is_a_one_key_map_of_a_known_function() {
    assert_eq!(
        as_call(&json!({"get_param": "a"})),
        Some(("get_param", &json!("a")))
    );
    assert_eq!(as_call(&json!({"get_param": "a", "b": 1})), None);
    assert_eq!(as_call(&json!({"get_input": "a"})), None);
    assert_eq!(as_call(&json!("get_param")), None);
}

#[test]
fn data_without_calls_is_returned_as_is() {
    let v = json!({"a": [1, "two", {"get_input": "x"}], "b": null});
    assert_eq!(
        ok(v.clone()),
        Resolved {
            value: v,
            hidden: false
        }
    );
}

#[test]
fn get_param_by_name_and_by_path() {
    assert_eq!(ok(json!({"get_param": "name"})).value, json!("web"));
    assert_eq!(ok(json!({"get_param": "port"})).value, json!(8080));
    assert_eq!(
        ok(json!({"get_param": ["net", "dns", 1]})).value,
        json!("8.8.8.8")
    );
    // Path steps may themselves be calls.
    assert_eq!(
        ok(json!({"get_param": ["net", {"get_param": "which"}, "0"]})).value,
        json!("1.1.1.1")
    );
}

#[test]
fn get_param_errors_name_the_parameter_and_the_place() {
    assert_eq!(
        err(json!({"get_param": "nope"})),
        "resources.r.properties.p: get_param: parameter \"nope\" does not exist"
    );
    assert_eq!(
        err(json!({"get_param": ["net", "gateway"]})),
        "resources.r.properties.p: get_param: parameter \"net\": no element \"gateway\" in the value"
    );
    assert!(err(json!({"get_param": 3})).contains("expected a parameter name, got a number"));
}

#[test]
fn hidden_parameters_mark_everything_they_flow_into() {
    assert!(ok(json!({"get_param": "secret"})).hidden);
    let r = ok(json!({"a": {"str_replace": {
        "template": "pw=$PW", "params": {"$PW": {"get_param": "secret"}}}}}));
    assert_eq!(r.value, json!({"a": "pw=s3cr3t"}));
    assert!(r.hidden);
    assert!(!ok(json!({"get_param": "name"})).hidden);
}

#[test]
fn errors_never_show_resolved_values() {
    // A hidden string where a list is expected: the error says what kind, not what value.
    let e = err(json!({"list_join": [",", {"get_param": "secret"}]}));
    assert!(e.contains("expected a list to join, got a string"), "{e}");
    assert!(!e.contains("s3cr3t"), "{e}");
}

#[test]
fn get_resource_and_get_attr_ask_the_resolver() {
    assert_eq!(ok(json!({"get_resource": "srv"})).value, json!("server-1"));
    assert_eq!(
        ok(json!({"get_attr": ["db", "host"]})).value,
        json!("10.0.0.5")
    );
    assert_eq!(
        ok(json!({"get_attr": ["db", "info", "ports", 1]})).value,
        json!(5433)
    );
    assert_eq!(
        err(json!({"get_attr": ["db", "nope"]})),
        "resources.r.properties.p: get_attr: resource \"db\" has no attribute \"nope\""
    );
    assert_eq!(
        err(json!({"get_resource": "later"})),
        "resources.r.properties.p: get_resource: resource \"later\" has no value yet"
    );
    assert!(err(json!({"get_attr": ["db"]})).contains("expected [resource, attribute, key…]"));
}

#[test]
fn errors_inside_arguments_name_the_nested_place() {
    let e = err(json!({"env": {"str_replace": {
        "template": "x", "params": {"$H": {"get_attr": ["web", "host"]}}}}}));
    assert_eq!(
        e,
        "resources.r.properties.p.env.str_replace.params.$H: get_attr: resource \"web\" has no attribute \"host\""
    );
}

#[test]
fn str_replace_longest_key_first_without_rescanning() {
    let r = ok(json!({"str_replace": {
        "template": "$host:$host_port $n $j $b $z",
        "params": {
            "$host": "$host_port",
            "$host_port": 80,
            "$n": null,
            "$j": {"a": [1]},
            "$b": true,
            "$z": "ünï"
        }
    }}));
    assert_eq!(r.value, json!("$host_port:80  {\"a\": [1]} True ünï"));
    assert!(
        err(json!({"str_replace": {"template": 1, "params": {}}}))
            .contains("expected {template: <string>, params: <map>}")
    );
}

#[test]
fn str_replace_template_may_come_from_a_call() {
    let r = ok(json!({"str_replace": {
        "template": {"get_param": "name"}, "params": {"we": "ca"}}}));
    assert_eq!(r.value, json!("cab"));
}

#[test]
fn list_join_joins_several_lists_and_encodes_non_strings() {
    let r =
        ok(json!({"list_join": [", ", ["a", 1], {"get_param": ["net", "dns"]}, [{"k": true}]]}));
    assert_eq!(r.value, json!("a, 1, 1.1.1.1, 8.8.8.8, {\"k\": true}"));
    assert!(err(json!({"list_join": [1, ["a"]]})).contains("expected [delimiter, list, …]"));
}

#[test]
fn get_file_cannot_be_resolved_late() {
    assert!(err(json!({"get_file": "x.sh"})).contains("only allowed in a template file"));
}

#[test]
fn references_finds_targets_in_nested_arguments() {
    let v = json!({
        "a": {"get_resource": "cfg"},
        "b": [{"str_replace": {"template": "$x", "params": {"$x": {"get_attr": ["db", "host"]}}}}],
        "c": {"get_param": "name"},
        "d": {"get_input": "not_a_resource"}
    });
    assert_eq!(
        references(&v),
        BTreeSet::from(["cfg".to_owned(), "db".to_owned()])
    );
}

#[test]
fn select_walks_keys_and_indexes() {
    let v = json!({"a": [{"b": 1}], "7": "seven"});
    assert_eq!(
        select(&v, &[json!("a"), json!(0), json!("b")]),
        Ok(json!(1))
    );
    assert_eq!(select(&v, &[json!(7)]), Ok(json!("seven")));
    assert_eq!(select(&v, &[]), Ok(v.clone()));
    assert!(select(&v, &[json!("a"), json!(3)]).is_err());
}

#[test]
fn inline_files_reads_paths_relative_to_the_template_as_heatclient_does() {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("templates/scripts")).expect("mkdir");
    std::fs::write(
        dir.path().join("templates/scripts/run.sh"),
        "#!/bin/sh\necho hi\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("shared.sh"), "shared\n").expect("write");
    let base = dir.path().join("templates");
    let mut v = json!({
        "config": {"get_file": "scripts/run.sh"},
        "other": [{"get_file": "./scripts/run.sh"}],
        // heatclient joins the path to the template's URL: `..` leaves its directory.
        "up": {"get_file": "../shared.sh"},
        "round": {"get_file": "scripts/../../shared.sh"},
    });
    inline_files(&mut v, base.as_path(), "resources.c.properties").expect("inlined");
    assert_eq!(
        v,
        json!({"config": "#!/bin/sh\necho hi\n", "other": ["#!/bin/sh\necho hi\n"],
               "up": "shared\n", "round": "shared\n"})
    );

    let refused = |arg: Value| {
        let mut v = json!({"config": {"get_file": arg}});
        inline_files(&mut v, base.as_path(), "resources.c.properties")
            .expect_err("refused")
            .to_string()
    };
    let e = refused(json!("/etc/passwd"));
    assert!(
        e.starts_with("resources.c.properties.config: get_file: "),
        "{e}"
    );
    assert!(
        e.contains("is absolute; give it relative to the template's directory"),
        "{e}"
    );
    assert!(refused(json!("file:///etc/passwd")).contains("is not a relative file path"));
    assert!(refused(json!(["a"])).contains("expected a relative file path, got a list"));
    assert!(refused(json!("missing.sh")).contains("cannot read"));
}
