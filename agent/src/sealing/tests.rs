//! Opening requests and sealing outputs with an agent's credentials.

use flue_proto::creds::{AgentSettings, UserCreds};
use flue_proto::{DeploymentStatus, OutputDecl};
use serde_json::json;
use time::OffsetDateTime;

use super::*;

fn credentials(server: &XKey, gateway: &XKey) -> AgentCredentials {
    AgentCredentials {
        user: UserCreds {
            jwt: String::new(),
            seed: "SUAEXAMPLE".into(),
        },
        settings: AgentSettings {
            tenant: "t".parse().expect("id"),
            server: "s1".parse().expect("id"),
            gateway_key: "N".into(),
            gateway_xkey: gateway.public_key(),
            xkey_seed: server.seed().expect("seed"),
            js_domain: None,
        },
    }
}

fn request(pw: serde_json::Value) -> DeploymentRequest {
    let now = OffsetDateTime::now_utc();
    serde_json::from_value(json!({
        "v": 1, "tenant": "t", "server": "s1", "deployment_id": "d1", "name": "d1",
        "action": "CREATE",
        "config": {
            "id": "c1", "group": "script", "config": "", "created_at": now.format(&time::format_description::well_known::Rfc3339).expect("time"),
            "inputs": [{"name": "pw", "hidden": true}, {"name": "plain"}],
            "outputs": [{"name": "token", "hidden": true}]
        },
        "input_values": {"pw": pw, "plain": "visible"},
        "created_at": now.format(&time::format_description::well_known::Rfc3339).expect("time"),
        "expires_at": (now + time::Duration::minutes(1)).format(&time::format_description::well_known::Rfc3339).expect("time"),
    }))
    .expect("request")
}

#[test]
fn sealed_inputs_open_and_unsealed_or_foreign_ones_are_refused() {
    let (server, gateway, other) = (XKey::new(), XKey::new(), XKey::new());
    let creds = credentials(&server, &gateway);
    let to_server = seal::public_key(&server.public_key()).expect("key");
    let sealed = seal::seal(&json!("s3cret"), &gateway, &to_server).expect("sealed");
    let opened = open_request(Some(&creds), &request(sealed.clone())).expect("opens");
    assert_eq!(opened.input_values["pw"], json!("s3cret"));
    assert_eq!(opened.input_values["plain"], json!("visible"));

    let e = open_request(Some(&creds), &request(json!("s3cret"))).expect_err("plain");
    assert!(matches!(e, SealRefusal::Unsealed(_)), "{e}");
    let forged = seal::seal(&json!("x"), &other, &to_server).expect("sealed");
    let e = open_request(Some(&creds), &request(forged)).expect_err("forged");
    assert!(matches!(e, SealRefusal::Unopenable(_)), "{e}");
    let e = open_request(None, &request(sealed)).expect_err("no keys");
    assert!(matches!(e, SealRefusal::NoCredentials), "{e}");
}

#[test]
fn hidden_outputs_are_sealed_to_the_gateway_and_others_left_alone() {
    let (server, gateway) = (XKey::new(), XKey::new());
    let creds = credentials(&server, &gateway);
    let decls: Vec<OutputDecl> =
        serde_json::from_value(json!([{"name": "token", "hidden": true}, {"name": "url"}]))
            .expect("decls");
    let result = DeploymentResult {
        status: DeploymentStatus::Complete,
        status_reason: None,
        outputs: [
            ("token".to_owned(), json!("t0ken")),
            ("url".to_owned(), json!("http://x")),
        ]
        .into(),
        deploy_stdout: String::new(),
        deploy_stderr: String::new(),
        deploy_status_code: Some(0),
        started_at: None,
        finished_at: OffsetDateTime::now_utc(),
    };
    let sealed = seal_outputs(Some(&creds), result.clone(), &decls);
    let from_server = seal::public_key(&server.public_key()).expect("key");
    assert_eq!(
        seal::open(&sealed.outputs["token"], &gateway, &from_server).expect("opens"),
        json!("t0ken")
    );
    assert_eq!(sealed.outputs["url"], json!("http://x"));
    let dropped = seal_outputs(None, result, &decls);
    assert!(!dropped.outputs.contains_key("token"));
}
