//! The gateway's sealing rules on records, without a broker.

use flue_proto::seal;
use serde_json::json;

use super::*;
use crate::record::tests::{config, record};

fn sealed_record(gateway: &XKey) -> DeploymentRecord {
    let mut r = record();
    let hidden = r.hidden_inputs.clone();
    seal_at_rest(&mut r.deployment.input_values, &hidden, gateway).expect("sealed");
    r
}

#[test]
fn a_request_carries_hidden_values_sealed_to_the_server_and_the_same_bytes_each_time() {
    let (gateway, agent) = (XKey::new(), XKey::new());
    let r = sealed_record(&gateway);
    assert!(seal::is_sealed(&r.deployment.input_values["secret"]));
    let public = || seal::public_key(&agent.public_key());
    let (values, config) = for_server(
        &r,
        &config(),
        &gateway,
        public().map_err(|_| SealFailure::NoServerKey(r.deployment.server_id.clone())),
    )
    .expect("sealed for the server");
    let opened = seal::open(&values["secret"], &agent, &gateway).expect("the agent opens it");
    assert_eq!(opened, json!("s3cret"));
    assert_eq!(values["foo"], json!("given"), "plain values stay plain");
    let secret = config
        .inputs
        .iter()
        .find(|i| i.name == "secret")
        .expect("decl");
    assert_eq!(secret.default, None, "hidden defaults never travel");
    let (again, _) = for_server(&r, &config, &gateway, Ok(public().expect("key"))).expect("again");
    assert_eq!(values, again, "rebuilt requests keep their digest");
}

#[test]
fn a_server_without_a_key_gets_no_hidden_value_but_may_get_plain_ones() {
    let gateway = XKey::new();
    let r = sealed_record(&gateway);
    let none = || Err(SealFailure::NoServerKey(r.deployment.server_id.clone()));
    let e = for_server(&r, &config(), &gateway, none()).expect_err("refused");
    assert!(e.to_string().contains("no sealing key"), "{e}");
    let mut plain = r.clone();
    plain.deployment.input_values.remove("secret");
    assert!(for_server(&plain, &config(), &gateway, none()).is_ok());
}

#[test]
fn outputs_are_kept_only_when_sealed_by_the_servers_agent() {
    let (gateway, agent, intruder) = (XKey::new(), XKey::new(), XKey::new());
    let server = Ok(seal::public_key(&agent.public_key()).expect("key"));
    let to_gateway = seal::public_key(&gateway.public_key()).expect("key");
    let mut outputs: BTreeMap<String, Value> = [
        (
            "pw".to_owned(),
            seal::seal(&json!("out-s3cret"), &agent, &to_gateway).expect("s"),
        ),
        (
            "forged".to_owned(),
            seal::seal(&json!("x"), &intruder, &to_gateway).expect("s"),
        ),
        ("plain".to_owned(), json!("visible")),
    ]
    .into();
    let refused = received_outputs(&mut outputs, &gateway, &server);
    assert_eq!(refused, ["forged".to_owned()].into());
    assert_eq!(
        seal::open(&outputs["pw"], &gateway, &gateway).expect("at rest"),
        json!("out-s3cret")
    );

    let mut r = record();
    r.hidden_outputs = vec!["pw".into(), "leaked".into()];
    r.deployment.status = DeploymentStatus::Complete;
    r.deployment.outputs = outputs.clone();
    assert!(settle_hidden_outputs(&mut r, &refused));
    assert_eq!(r.deployment.status, DeploymentStatus::Failed);
    assert!(!r.deployment.outputs.contains_key("forged"));
    assert!(r.deployment.outputs.contains_key("pw"));

    let mut r = record();
    r.hidden_outputs = vec!["leaked".into()];
    r.deployment.status = DeploymentStatus::Complete;
    r.deployment.outputs = [("leaked".to_owned(), json!("in the clear"))].into();
    assert!(settle_hidden_outputs(&mut r, &BTreeSet::new()));
    assert!(r.deployment.outputs.is_empty());
    assert!(
        r.deployment
            .status_reason
            .expect("reason")
            .contains("\"leaked\"")
    );

    let mut fine = record();
    fine.deployment.outputs = outputs;
    fine.deployment.outputs.remove("forged");
    fine.hidden_outputs = vec!["pw".into()];
    assert!(!settle_hidden_outputs(&mut fine, &BTreeSet::new()));
}

#[test]
fn compared_inputs_are_the_opened_ones() {
    let gateway = XKey::new();
    let (a, b) = (sealed_record(&gateway), sealed_record(&gateway));
    assert_ne!(a.deployment.input_values, b.deployment.input_values);
    assert_eq!(
        opened_inputs(&a, &gateway).expect("opens"),
        opened_inputs(&b, &gateway).expect("opens")
    );
}

#[test]
fn hidden_defaults_are_sealed_in_stored_configs() {
    let gateway = XKey::new();
    let mut c = config();
    seal_config_defaults(&mut c, &gateway).expect("sealed");
    let secret = c.inputs.iter().find(|i| i.name == "secret").expect("decl");
    let sealed = secret.default.as_ref().expect("default");
    assert_eq!(
        seal::open(sealed, &gateway, &gateway).expect("opens"),
        json!("s3cret")
    );
    let foo = c.inputs.iter().find(|i| i.name == "foo").expect("decl");
    assert_eq!(foo.default, Some(json!("dflt")));
}
