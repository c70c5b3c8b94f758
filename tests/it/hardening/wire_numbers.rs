//! Numbers cross every hop unchanged: a value the gateway decodes, stores and serves
//! again is the same `f64` (found by the `deployment_request` and `agent_message` fuzz
//! targets: without serde_json's `float_roundtrip`, `1.5e200` came back one bit off).

use flue_tests::Flue;
use serde_json::{Value, json};

/// Written as a client sends them; compared with Rust's own (correctly rounded) literals.
// The extra digits are the point: they must round the same way at every hop.
#[allow(clippy::excessive_precision)]
const NUMBERS: [(&str, f64); 5] = [
    ("1.5e200", 1.5e200),
    (
        "4444444444444444.4444444444",
        4_444_444_444_444_444.444_444_444_4,
    ),
    ("2.2250738585072011e-308", 2.225_073_858_507_201_1e-308),
    ("1e23", 1e23),
    ("0.30000000000000004", 0.300_000_000_000_000_04),
];

#[tokio::test]
async fn numbers_in_a_stored_config_come_back_bit_for_bit() {
    let flue = Flue::start().await;
    let options: Vec<String> = NUMBERS
        .iter()
        .enumerate()
        .map(|(i, (text, _))| format!("\"n{i}\": {text}"))
        .collect();
    let body = format!(
        r#"{{"id": "numbers", "group": "script", "config": "", "options": {{{}}}}}"#,
        options.join(", ")
    );
    let created = flue
        .http()
        .post(format!("{}/v1/configs", flue.gateway.url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("create the config");
    assert!(created.status().is_success(), "{}", created.status());

    let read: Value = flue
        .http()
        .get(format!("{}/v1/configs/numbers", flue.gateway.url()))
        .send()
        .await
        .expect("read the config")
        .json()
        .await
        .expect("a config");
    for (i, (text, exact)) in NUMBERS.iter().enumerate() {
        let back = &read["options"][format!("n{i}")];
        assert_eq!(
            back.as_f64().map(f64::to_bits),
            Some(exact.to_bits()),
            "{text} came back as {back}, not {}",
            json!(exact)
        );
    }
}
