//! Tests of the input conversions, against what Python and Heat print (the expected texts
//! were taken from python3's `repr`, `str` and `json.dumps`).

use super::*;
use serde_json::json;

#[test]
fn floats_print_as_python_repr_prints_them() {
    let cases = [
        (1.5, "1.5"),
        (100.0, "100.0"),
        (1e16, "1e+16"),
        (1e15, "1000000000000000.0"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1.5e300, "1.5e+300"),
        (-2.5e-7, "-2.5e-07"),
        (123456789.125, "123456789.125"),
        (0.1, "0.1"),
        (3.0, "3.0"),
        (-0.0, "-0.0"),
    ];
    for (f, want) in cases {
        assert_eq!(python_float(f), want, "{f:e}");
    }
}

#[test]
fn json_is_written_as_python_json_dumps_writes_it() {
    let value = json!({"a": [1, true, null, "é😀\n\"\\x\u{7f}"], "b": {"c": 1.0}});
    assert_eq!(
        python_json(&value),
        r#"{"a": [1, true, null, "\u00e9\ud83d\ude00\n\"\\x\u007f"], "b": {"c": 1.0}}"#
    );
    assert_eq!(python_json(&json!(u64::MAX)), "18446744073709551615");
}

#[test]
fn string_inputs_become_text_as_the_dispatcher_makes_them() {
    let s = InputType::String;
    assert_eq!(dispatched(s, json!(true)), json!("True"));
    assert_eq!(dispatched(s, json!(false)), json!("False"));
    assert_eq!(dispatched(s, json!(3)), json!("3"));
    assert_eq!(dispatched(s, json!(1.5)), json!("1.5"));
    assert_eq!(
        dispatched(s, json!({"a": [1, 2]})),
        json!(r#"{"a": [1, 2]}"#)
    );
    assert_eq!(
        dispatched(s, json!(null)),
        json!("None"),
        "Python's str(None), as 55-heat-config hands it"
    );
    assert_eq!(dispatched(s, json!("as is")), json!("as is"));
    // Other types keep their JSON type.
    assert_eq!(dispatched(InputType::Number, json!(3)), json!(3));
    assert_eq!(dispatched(InputType::Boolean, json!(true)), json!(true));
    assert_eq!(dispatched(InputType::Json, json!(null)), json!(null));
}

#[test]
fn values_take_their_declared_type() {
    let ok = |kind: &str, v: Value| typed(InputType::parse(kind), &v).expect(kind);
    assert_eq!(ok("Number", json!(" 8080 ")), json!(8080));
    assert_eq!(ok("Number", json!("-1.5")), json!(-1.5));
    assert_eq!(ok("Number", json!("18446744073709551615")), json!(u64::MAX));
    assert_eq!(ok("Number", json!(7)), json!(7));
    assert_eq!(ok("Boolean", json!("true")), json!(true));
    assert_eq!(ok("Boolean", json!("No")), json!(false));
    assert_eq!(ok("Boolean", json!(" on ")), json!(true));
    assert_eq!(ok("Boolean", json!(1)), json!(true));
    assert_eq!(ok("Boolean", json!(false)), json!(false));
    assert_eq!(ok("Json", json!(r#"{"a": [1]}"#)), json!({"a": [1]}));
    assert_eq!(ok("Json", json!("5")), json!(5));
    assert_eq!(ok("Json", json!([1])), json!([1]));
    assert_eq!(
        ok("CommaDelimitedList", json!("a, b ,c")),
        json!(["a", "b", "c"])
    );
    assert_eq!(ok("CommaDelimitedList", json!(["x", 1])), json!(["x", 1]));
    assert_eq!(
        ok("String", json!(true)),
        json!(true),
        "the dispatcher's job"
    );
    assert_eq!(ok("Whatever", json!({"k": 1})), json!({"k": 1}));
    for kind in ["String", "Number", "Boolean", "Json", "CommaDelimitedList"] {
        assert_eq!(
            ok(kind, json!(null)),
            json!(null),
            "{kind}: unset stays unset"
        );
        assert_eq!(ok(kind, json!("")), json!(""), "{kind}: empty stays empty");
    }
}

#[test]
fn values_that_are_not_their_type_are_refused_without_showing_them() {
    let bad = |kind: &str, v: Value| {
        typed(InputType::parse(kind), &v)
            .expect_err(kind)
            .at("input_values.x")
    };
    let e = bad("Number", json!("8080s3cret"));
    assert_eq!(
        e.to_string(),
        "input_values.x is declared Number, but its value is text that does not read as one"
    );
    assert!(!e.to_string().contains("s3cret"));
    assert_eq!(bad("Number", json!("inf")).kind, "Number");
    assert_eq!(bad("Number", json!(true)).found, "a boolean");
    assert_eq!(bad("Boolean", json!("maybe")).kind, "Boolean");
    assert_eq!(bad("Boolean", json!(2)).found, "a number");
    assert_eq!(bad("Json", json!("{not json")).kind, "Json");
    assert_eq!(bad("CommaDelimitedList", json!({"a": 1})).found, "a map");
    // Unchecked values (an older gateway) reach the hook as they are.
    assert_eq!(
        typed_or_as_is(InputType::Number, &json!("abc")),
        json!("abc")
    );
}

#[test]
fn script_environment_text_is_what_hook_script_writes() {
    assert_eq!(env_text(&json!("x y")), "x y");
    assert_eq!(env_text(&json!([1, "a"])), r#"[1, "a"]"#);
    assert_eq!(env_text(&json!({"k": {"n": 1.0}})), r#"{"k": {"n": 1.0}}"#);
    assert_eq!(env_text(&json!(8080)), "8080");
    assert_eq!(env_text(&json!(true)), "true");
    assert_eq!(env_text(&json!(null)), "");
}

#[test]
fn an_items_default_is_typed_as_heats_engine_keeps_it() {
    use super::item_default;
    assert_eq!(item_default(InputType::String, None), None);
    assert_eq!(item_default(InputType::String, Some(&json!(null))), None);
    assert_eq!(
        item_default(InputType::String, Some(&json!(true))),
        Some(json!("True"))
    );
    assert_eq!(
        item_default(InputType::Number, Some(&json!("0.5"))),
        Some(json!(0.5))
    );
    assert_eq!(
        item_default(InputType::Boolean, Some(&json!("yes"))),
        Some(json!(true))
    );
}
