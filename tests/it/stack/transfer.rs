//! `flue stack abandon` and `flue stack adopt`: a stack leaves Flue into a file and
//! comes back from it without any hook running, and keeps working; a record is refused
//! wherever it does not belong.

use std::os::unix::fs::PermissionsExt as _;

use flue_proto::auth::Role;
use flue_proto::stack_export::StackExport;
use flue_proto::{CreateTenant, EventType, RegisterServer, ServerId, StackId, TenantId};
use flue_tests::{EventTap, Flue, Tokens, WAIT};
use serde_json::Value;

use super::{cluster, create_stack, deployments, example, flue, lines, put_data};

#[tokio::test]
async fn a_stack_abandoned_then_adopted_ran_nothing_in_between_and_deletes_as_before() {
    let (env, _agents) = cluster(&["db", "web"]).await;
    let mut tap = EventTap::from_start(&env.nats.events_client().await).await;
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let run = create_stack(&env, "shop", &example("two-tier"), &[&data_param]).await;
    assert_eq!(run.code, 0, "{run}");
    put_data(&env, "shop", "marker", "kept").await;
    let before = (
        deployments(&env, "db").await.len(),
        deployments(&env, "web").await.len(),
    );
    let password = std::fs::read_to_string(data.join("db/password")).expect("db password");
    let password = password.trim();
    assert!(password.len() >= 16, "{password:?}");

    // Abandon: the record is written (0600), the stack is gone, nothing ran.
    let record = env.path("shop.json");
    let out = record.display().to_string();
    let run = flue(&env, &["stack", "abandon", "shop", "--out", &out]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("abandoned"), "{run}");
    let mode = std::fs::metadata(&record)
        .expect("record")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&record).expect("record");
    assert!(
        !text.contains(password),
        "the hidden password is in the record in the clear"
    );
    let export: StackExport = serde_json::from_str(&text).expect("a stack export");
    assert_eq!(export.stack.state.units.len(), 2);
    assert_eq!(export.data.len(), 1, "{:?}", export.data);
    let db_run = export
        .deployments
        .values()
        .find(|d| d.hidden_outputs.iter().any(|n| n == "password"))
        .expect("db's deployment is in the record");
    assert!(
        flue_proto::seal::is_sealed(&db_run.deployment.outputs["password"]),
        "{:?}",
        db_run.deployment.outputs
    );
    let show = flue(&env, &["stack", "show", "shop"]).await;
    assert_eq!(show.code, 2, "{show}");
    assert!(show.stderr.contains("not_found"), "{show}");
    assert!(
        !lines(&data.join("lifecycle.log"))
            .iter()
            .any(|l| l.starts_with("DELETE")),
        "a DELETE hook ran"
    );
    assert!(data.join("db").exists() && data.join("web").exists());
    let kv = async_nats::jetstream::new(env.nats.client().await)
        .get_key_value(flue_proto::subject::DATA_BUCKET)
        .await
        .expect("data bucket");
    assert_eq!(kv.get("default.shop.marker").await.expect("read"), None);
    let abandoned = tap
        .wait_for("stack.abandoned", WAIT, |e| {
            e.ty == EventType::StackAbandoned
        })
        .await;
    assert_eq!(abandoned.subject, "stacks/shop");

    // Abandoning again finds nothing; a second abandon does not overwrite the record.
    let again = flue(&env, &["stack", "abandon", "shop", "--out", &out]).await;
    assert_eq!(again.code, 2, "{again}");
    assert!(again.stderr.contains("exists"), "{again}");

    // Adopt: the stack is back as it was, its data too, and still nothing ran.
    let run = flue(&env, &["stack", "adopt", "shop", "--from", &out]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("CREATE_COMPLETE"), "{run}");
    let show = flue(&env, &["stack", "show", "shop"]).await;
    assert_eq!(show.code, 0, "{show}");
    assert!(show.stdout.contains("CREATE_COMPLETE"), "{show}");
    assert_eq!(
        kv.get("default.shop.marker").await.expect("read"),
        Some("kept".into())
    );
    assert_eq!(
        (
            deployments(&env, "db").await.len(),
            deployments(&env, "web").await.len()
        ),
        before,
        "adopting ran a deployment"
    );
    tap.wait_for("stack.adopted", WAIT, |e| e.ty == EventType::StackAdopted)
        .await;
    // A second adopt of the same record is refused: the stack exists.
    let twice = flue(&env, &["stack", "adopt", "shop", "--from", &out]).await;
    assert_eq!(twice.code, 2, "{twice}");
    assert!(twice.stderr.contains("exists"), "{twice}");

    // Delete works as usual: web's DELETE (which had the hidden password) then db's.
    let run = flue(&env, &["stack", "delete", "shop"]).await;
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        lines(&data.join("lifecycle.log")),
        ["DELETE web", "DELETE db"]
    );
    assert!(!data.join("db").exists() && !data.join("web").exists());
}

#[tokio::test]
async fn an_abandoned_record_is_refused_where_it_does_not_belong() {
    let env = Flue::start_operator(&[]).await;
    let mut agents = Vec::new();
    for s in ["db", "web"] {
        env.register(s).await;
        agents.push(env.agent(s, &[]).await);
    }
    let data = env.path("data");
    let data_param = format!("data_dir={}", data.display());
    let run = create_stack(&env, "shop", &example("two-tier"), &[&data_param]).await;
    assert_eq!(run.code, 0, "{run}");
    let shop = StackId::new("shop").expect("id");
    let engine = env.gateway.client_as(Role::Engine);

    // A viewer may read the stack, not its export (it holds sealed hidden values).
    let viewer = env.gateway.client_as(Role::Viewer);
    let refused = viewer.export_stack(&shop).await.expect_err("viewer");
    assert!(refused.to_string().contains("forbidden"), "{refused}");

    // Abandon at a revision the stack is no longer at: refused, the stack stays.
    let export = engine.export_stack(&shop).await.expect("export");
    let stale = engine
        .abandon_stack(&shop, export.stack.revision - 1)
        .await
        .expect_err("stale revision");
    assert!(stale.to_string().contains("revision_mismatch"), "{stale}");
    assert!(engine.get_stack(&shop).await.is_ok());

    // Another tenant of the same gateway, with servers of the same names: its admin
    // cannot adopt the record (the hidden values are the first tenant's), and nothing
    // of it is written there.
    let acme = TenantId::new("acme").expect("id");
    env.gateway
        .client_as(Role::Operator)
        .create_tenant(&CreateTenant {
            id: acme.clone(),
            name: "Acme".to_owned(),
        })
        .await
        .expect("tenant");
    let acme_tokens = Tokens::for_tenant(&env.gateway.state_dir(), &acme);
    let acme_as = |role: Role| {
        flue_client::Client::new(env.gateway.url())
            .expect("client")
            .with_token(acme_tokens.get(role))
    };
    for s in ["db", "web"] {
        acme_as(Role::Admin)
            .register_server(&RegisterServer {
                id: ServerId::new(s).expect("id"),
                name: s.to_owned(),
                transport: Default::default(),
            })
            .await
            .expect("register in acme");
    }
    let theirs = acme_as(Role::Admin)
        .adopt_stack(&shop, &export)
        .await
        .expect_err("another tenant's record");
    assert!(
        theirs.to_string().contains("belongs to another tenant"),
        "{theirs}"
    );
    // Without the deployments its units name (and that acme does not have): refused too.
    let mut bare = export.clone();
    bare.deployments.clear();
    let refused = acme_as(Role::Admin)
        .adopt_stack(&shop, &bare)
        .await
        .expect_err("units naming deployments nowhere");
    assert!(
        refused
            .to_string()
            .contains("neither in the record nor here"),
        "{refused}"
    );
    let missing = acme_as(Role::Engine)
        .get_stack(&shop)
        .await
        .expect_err("absent");
    assert!(missing.to_string().contains("not_found"), "{missing}");
    let config = export.configs.keys().next().expect("a config");
    let missing = acme_as(Role::Engine)
        .get_config(config)
        .await
        .expect_err("no config written");
    assert!(missing.to_string().contains("not_found"), "{missing}");

    // Abandon for real, then records that are not the one written are refused.
    engine
        .abandon_stack(&shop, export.stack.revision)
        .await
        .expect("abandon");
    let other = StackId::new("shop2").expect("id");
    let renamed = engine
        .adopt_stack(&other, &export)
        .await
        .expect_err("renamed");
    assert!(renamed.to_string().contains("stack.id"), "{renamed}");
    let mut tampered = export.clone();
    let db_run = tampered
        .deployments
        .values_mut()
        .find(|d| d.hidden_outputs.iter().any(|n| n == "password"))
        .expect("db's deployment");
    db_run.deployment.outputs.insert(
        "password".to_owned(),
        serde_json::json!({"$flue_sealed": "AAAA"}),
    );
    let refused = engine
        .adopt_stack(&shop, &tampered)
        .await
        .expect_err("tampered");
    assert!(
        refused.to_string().contains("not sealed by this gateway"),
        "{refused}"
    );
    let mut in_flight = export.clone();
    let unit = in_flight
        .stack
        .state
        .units
        .values_mut()
        .next()
        .expect("unit");
    unit.status = flue_proto::OpStatus::InProgress;
    let refused = engine
        .adopt_stack(&shop, &in_flight)
        .await
        .expect_err("in flight");
    assert!(refused.to_string().contains("in flight"), "{refused}");
    // None of the refusals wrote the stack; the record as written is still taken.
    assert!(engine.get_stack(&shop).await.is_err());
    let adopted = engine.adopt_stack(&shop, &export).await.expect("adopt");
    assert_eq!(adopted.state.units.len(), 2);

    // The body is checked like any other: an unknown field is a 422 naming it.
    let mut body: Value = serde_json::to_value(&export).expect("json");
    body["extra"] = Value::Bool(true);
    let answer = env
        .gateway
        .http()
        .post(format!("{}/v1/stacks/shop3/adopt", env.gateway.url()))
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 422);
}

/// While an operation runs on the stack, abandoning is refused, the stack stays and no
/// record is left behind; once it ended, the stack is abandoned.
#[tokio::test]
async fn a_stack_is_not_abandoned_while_an_operation_runs_on_it() {
    let (env, _agents) = cluster(&["s1"]).await;
    let record = env.path("record.log");
    let t = env.path("t.yaml");
    std::fs::write(&t, super::WAITING).expect("template");
    let t = t.display().to_string();
    let p = format!("record={}", record.display());
    let create = super::flue_in_background(&env, &["stack", "create", "k", "-t", &t, "-P", &p]);
    flue_tests::wait_until("a started", WAIT, || {
        lines(&record).iter().any(|l| l == "start a").then_some(())
    })
    .await;

    let out = env.path("k.json").display().to_string();
    let run = flue(&env, &["stack", "abandon", "k", "--out", &out]).await;
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("conflict"), "{run}");
    assert!(
        !std::path::Path::new(&out).exists(),
        "a refused abandon left its record"
    );

    put_data(&env, "k", "go", "1").await;
    let created = create.await.expect("create");
    assert_eq!(created.code, 0, "{created}");
    let run = flue(&env, &["stack", "abandon", "k", "--out", &out]).await;
    assert_eq!(run.code, 0, "{run}");
    assert!(std::path::Path::new(&out).exists());
    assert_eq!(lines(&record), ["start a", "end a"]);
}
