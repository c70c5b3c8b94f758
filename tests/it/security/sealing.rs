//! Hidden values sealed end to end: hooks get them in the clear, while every byte the
//! broker holds (streams, KV, its store on disk), every API read, event and log line
//! holds ciphertext or `<hidden>` only.

use async_nats::jetstream;
use flue_proto::creds::AgentCredentials;
use flue_proto::signing;
use flue_proto::{
    AgentMessage, ConfigId, ConfigSpec, CreateDeployment, Deployment, DeploymentResult,
    DeploymentStatus, OutputRef, PROTOCOL_VERSION, RequestDigest, ServerId, TenantId, subject,
};
use flue_tests::{Agent, Flue};
use serde_json::json;

use super::scan::{assert_nowhere, contains, everything, random_secret, stream_bytes};

/// Creates a `script` config from its JSON inputs and outputs.
async fn config(
    flue: &Flue,
    id: &str,
    script: &str,
    inputs: serde_json::Value,
    outputs: serde_json::Value,
) {
    let spec: ConfigSpec = serde_json::from_value(json!({
        "id": id, "group": "script", "config": script, "inputs": inputs, "outputs": outputs,
    }))
    .expect("spec");
    flue.client().create_config(&spec).await.expect("config");
}

async fn deploy(flue: &Flue, body: CreateDeployment) -> Deployment {
    let d = flue
        .client()
        .create_deployment(&body)
        .await
        .expect("deployment");
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    done
}

fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().expect("id")
}

#[tokio::test]
async fn hidden_inputs_and_outputs_reach_hooks_in_the_clear_and_are_stored_and_published_only_sealed()
 {
    let flue = Flue::start().await;
    let secret_in = random_secret("in");
    let secret_out = random_secret("out");
    let secret_default = random_secret("default");
    let visible = random_secret("visible");
    let out_file = flue.path("out-secret");
    std::fs::write(&out_file, &secret_out).expect("write");
    let seen = |n: &str| flue.path(&format!("seen-{n}"));
    for server in ["s1", "s2"] {
        flue.register(server).await;
    }
    let agents: Vec<Agent> = vec![flue.agent("s1", &[]).await, flue.agent("s2", &[]).await];

    // The hooks print the secrets too: their output must come back hidden.
    config(
        &flue,
        "makes-token",
        &format!(
            "#!/bin/sh\necho \"using $pw and $shown\"\nprintf '%s' \"$pw\" > '{}'\ncat '{}' > \"$heat_outputs_path.token\"\n",
            seen("1").display(),
            out_file.display()
        ),
        json!([{"name": "pw", "hidden": true}, {"name": "shown"}]),
        json!([{"name": "token", "hidden": true}]),
    )
    .await;
    config(
        &flue,
        "uses-token",
        &format!(
            "#!/bin/sh\necho \"got $tok with $dflt\"\nprintf '%s %s' \"$tok\" \"$dflt\" > '{}'\n",
            seen("2").display()
        ),
        json!([{"name": "tok"}, {"name": "dflt", "hidden": true, "default": secret_default}]),
        json!([]),
    )
    .await;
    // Declares `pw` plain: it stays hidden because it comes from a hidden input.
    config(
        &flue,
        "reuses-pw",
        &format!(
            "#!/bin/sh\nprintf '%s' \"$pw\" > '{}'\n",
            seen("3").display()
        ),
        json!([{"name": "pw"}, {"name": "shown"}]),
        json!([]),
    )
    .await;

    let first = deploy(
        &flue,
        CreateDeployment {
            input_values: [
                ("pw".to_owned(), json!(secret_in)),
                ("shown".to_owned(), json!(visible)),
            ]
            .into(),
            ..CreateDeployment::new(id::<ConfigId>("makes-token"), id::<ServerId>("s1"))
        },
    )
    .await;
    assert_eq!(std::fs::read_to_string(seen("1")).expect("seen"), secret_in);
    assert_eq!(first.outputs["token"], json!("<hidden>"));
    assert_eq!(first.input_values["pw"], json!("<hidden>"));
    assert_eq!(
        first.deploy_stdout,
        format!("using <hidden> and {visible}\n")
    );

    let reference = OutputRef {
        deployment_id: first.id.clone(),
        output: "token".into(),
    };
    let second = deploy(
        &flue,
        CreateDeployment {
            input_refs: [("tok".to_owned(), reference)].into(),
            ..CreateDeployment::new(id::<ConfigId>("uses-token"), id::<ServerId>("s2"))
        },
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(seen("2")).expect("seen"),
        format!("{secret_out} {secret_default}")
    );
    assert_eq!(second.deploy_stdout, "got <hidden> with <hidden>\n");

    // `inputs_from` re-uses inputs on their own server only (`security::references`).
    let third = deploy(
        &flue,
        CreateDeployment {
            inputs_from: Some(first.id.clone()),
            ..CreateDeployment::new(id::<ConfigId>("reuses-pw"), id::<ServerId>("s1"))
        },
    )
    .await;
    assert_eq!(std::fs::read_to_string(seen("3")).expect("seen"), secret_in);
    assert_eq!(third.input_values["pw"], json!("<hidden>"));

    let reads = [
        format!("/v1/deployments/{}", first.id),
        format!("/v1/deployments/{}", second.id),
        format!("/v1/deployments/{}", third.id),
        "/v1/configs/uses-token".to_owned(),
    ];
    let everything = everything(&flue, &agents, &reads).await;
    // The scans do see what is there: the plain input is in the broker's bytes.
    assert!(
        everything
            .iter()
            .any(|(place, bytes)| place == "stream messages" && contains(bytes, &visible))
    );
    assert!(
        everything
            .iter()
            .any(|(place, bytes)| place == "broker store" && contains(bytes, &visible))
    );
    assert_nowhere(&everything, &[&secret_in, &secret_out, &secret_default]);
}

#[tokio::test]
async fn a_stacks_hidden_parameter_and_hidden_output_are_stored_and_published_only_sealed() {
    let (env, agents) = crate::stack::cluster(&["s1", "s2"]).await;
    let secret_param = random_secret("param");
    let secret_out = random_secret("stackout");
    let param_file = env.path("param.txt");
    std::fs::write(&param_file, format!("{secret_param}\n")).expect("write");
    let out_file = env.path("out-secret");
    std::fs::write(&out_file, &secret_out).expect("write");
    let (seen_a, seen_b) = (env.path("seen-a"), env.path("seen-b"));
    let template = env.path("t.yaml");
    std::fs::write(
        &template,
        format!(
            r#"heat_template_version: 2018-08-31
parameters:
  pw: {{type: string, hidden: true}}
resources:
  gen_cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{{name: pw}}]
      outputs: [{{name: token, hidden: true}}]
      config: |
        #!/bin/sh
        echo "pw is $pw"
        printf '%s' "$pw" > '{seen_a}'
        cat '{out_file}' > "$heat_outputs_path.token"
  gen:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: gen_cfg}}
      server: s1
      input_values: {{pw: {{get_param: pw}}}}
  use_cfg:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{{name: tok}}]
      config: |
        #!/bin/sh
        printf '%s' "$tok" > '{seen_b}'
  use:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: use_cfg}}
      server: s2
      input_values: {{tok: {{get_attr: [gen, token]}}}}
"#,
            seen_a = seen_a.display(),
            seen_b = seen_b.display(),
            out_file = out_file.display(),
        ),
    )
    .expect("template");
    let t = template.display().to_string();
    let f = format!("pw={}", param_file.display());
    let run = crate::stack::flue(
        &env,
        &["stack", "create", "h", "-t", &t, "--parameter-file", &f],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        std::fs::read_to_string(&seen_a).expect("seen"),
        secret_param
    );
    assert_eq!(std::fs::read_to_string(&seen_b).expect("seen"), secret_out);
    // The gateway compares sealed values by what they hold: nothing changed, nothing runs.
    let run = crate::stack::flue(
        &env,
        &["stack", "update", "h", "-t", &t, "--parameter-file", &f],
    )
    .await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("unchanged, not run"), "{run}");
    let everything = everything(&env, &agents, &["/v1/stacks/h".to_owned()]).await;
    assert_nowhere(&everything, &[&secret_param, &secret_out]);
}

#[tokio::test]
async fn an_agent_without_credentials_refuses_hidden_values_and_never_runs_the_hook() {
    // An agent without credentials runs only when told it is insecure, on the anonymous
    // development broker, and answers unsigned: a gateway in the same development mode is
    // the only one that listens.
    let flue = Flue::start_dev_broker(&["--insecure-unsigned-answers"]).await;
    flue.register("bare").await;
    // Started without the credentials file its registration minted.
    let agent = Agent::spawn_with(
        &flue.nats.url(),
        "bare",
        &flue.path("agent-bare"),
        &[],
        &["--insecure-unsigned-requests"],
    );
    agent.ready().await;
    let ran = flue.path("ran");
    config(
        &flue,
        "needs-pw",
        &format!("#!/bin/sh\ntouch '{}'\n", ran.display()),
        json!([{"name": "pw", "hidden": true}]),
        json!([]),
    )
    .await;
    config(
        &flue,
        "plain",
        &format!("#!/bin/sh\ntouch '{}'\n", ran.display()),
        json!([{"name": "who"}]),
        json!([]),
    )
    .await;
    let d = flue
        .client()
        .create_deployment(&CreateDeployment {
            input_values: [("pw".to_owned(), json!(random_secret("pw")))].into(),
            ..CreateDeployment::new(id::<ConfigId>("needs-pw"), id::<ServerId>("bare"))
        })
        .await
        .expect("deployment");
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    let reason = done.status_reason.unwrap_or_default();
    assert!(
        reason.contains("no credentials") && reason.contains("--creds"),
        "{reason}"
    );
    assert!(!ran.exists(), "the hook ran");
    // The same agent still runs what has nothing hidden: the refusal is about the values.
    let plain = flue.deploy("plain", "bare", &[("who", "x")]).await;
    let done = flue.finished(&plain.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    assert!(ran.exists(), "the plain hook ran before its result came");
}

/// What an agent older than sealing (or a forger with the digest) would answer: the
/// gateway refuses to keep a hidden output that did not come sealed by the server's agent.
#[tokio::test]
async fn a_hidden_output_that_arrives_unsealed_is_dropped_and_fails_its_deployment() {
    let flue = Flue::start().await;
    // No agent: the answer below is the only one.
    flue.register("s1").await;
    config(
        &flue,
        "makes-token",
        "#!/bin/sh\n",
        json!([]),
        json!([{"name": "token", "hidden": true}, {"name": "note"}]),
    )
    .await;
    let d = flue
        .client()
        .create_deployment(&CreateDeployment::new(
            id::<ConfigId>("makes-token"),
            id::<ServerId>("s1"),
        ))
        .await
        .expect("deployment");
    // The 202 comes once the request is on the queue: its bytes give the digest to name.
    let js = jetstream::new(flue.nats.client().await);
    let mut queue = js.get_stream("FLUE_REQ").await.expect("stream");
    let last = queue.info().await.expect("info").state.last_sequence;
    let request = queue.get_raw_message(last).await.expect("request");
    let leaked = random_secret("leaked");
    let answer = AgentMessage::Finished {
        v: PROTOCOL_VERSION,
        deployment_id: d.id.clone(),
        result: DeploymentResult {
            status: DeploymentStatus::Complete,
            status_reason: None,
            outputs: [
                ("token".to_owned(), json!(leaked)),
                ("note".to_owned(), json!("kept")),
            ]
            .into(),
            deploy_stdout: String::new(),
            deploy_stderr: String::new(),
            deploy_status_code: Some(0),
            started_at: None,
            finished_at: time::OffsetDateTime::now_utc(),
        },
        request_digest: Some(RequestDigest::of(&request.payload)),
    };
    let tenant: TenantId = id("default");
    // Signed with the server's own key, as its agent would sign: the gateway takes the
    // answer in, and it is the missing seal that gets it refused.
    let body = serde_json::to_vec(&answer).expect("json");
    let creds = std::fs::read_to_string(flue.creds_path("s1")).expect("credentials");
    let creds = AgentCredentials::parse(&creds).expect("credentials");
    let claims = signing::AnswerClaims {
        v: signing::CLAIMS_VERSION,
        tenant: tenant.clone(),
        server: id("s1"),
        digest: RequestDigest::of(&body),
        at: time::OffsetDateTime::now_utc(),
    };
    let key = nkeys::KeyPair::from_seed(&creds.user.seed).expect("seed");
    let signed = signing::sign(&claims, &key).expect("signs");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(signing::ANSWER_CLAIMS_HEADER, signed.claims.as_str());
    headers.insert(signing::SIGNATURE_HEADER, signed.signature.as_str());
    js.publish_with_headers(subject::response(&tenant, &id("s1")), headers, body.into())
        .await
        .expect("publish")
        .await
        .expect("ack");

    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed);
    let reason = done.status_reason.unwrap_or_default();
    assert!(
        reason.contains("\"token\"") && reason.contains("sealed"),
        "{reason}"
    );
    assert!(!done.outputs.contains_key("token"), "{:?}", done.outputs);
    assert_eq!(done.outputs["note"], json!("kept"));
    // The forged answer holds it (the forger put it there); nothing the gateway wrote does.
    // The tenant account's streams and buckets, and the events account's (FLUE_EVT).
    let mut streams = stream_bytes(flue.nats.client().await).await;
    streams.extend(stream_bytes(flue.nats.events_client().await).await);
    for (name, bytes) in &streams {
        if name != "FLUE_RESP" {
            assert!(
                !contains(bytes, &leaked),
                "{name} holds the unsealed output"
            );
        }
    }
    assert!(
        contains(&streams["FLUE_RESP"], &leaked),
        "the scan reads the answer"
    );
}
