//! Roles and tenants: each role refused (403) where it may not go, with no effect; another
//! tenant's token finds nothing (404); `flue-gateway token` and the operator's tenant token.

use flue_gateway::auth::token;
use flue_proto::auth::Role;
use flue_tests::{Flue, Gateway, bin};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::http_auth::{call, claims, config, config_exists};

#[tokio::test]
async fn each_role_is_refused_403_on_routes_it_may_not_call_and_the_call_does_nothing() {
    let flue = Flue::start().await;
    let gw = &flue.gateway;
    let tokens = gw.tokens();
    let forbidden = |answer: &(StatusCode, Option<String>, Value)| {
        assert_eq!(answer.0, StatusCode::FORBIDDEN, "{}", answer.2);
        assert_eq!(answer.2["error"]["code"], "forbidden");
        assert!(
            answer
                .1
                .as_deref()
                .is_some_and(|c| c.contains("insufficient_scope"))
        );
    };
    // Writes by a role that does not own them: nothing created.
    for role in [Role::Viewer, Role::Listener, Role::Admin, Role::Operator] {
        let id = format!("by-{role}");
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/configs",
                Some(tokens.get(role)),
                Some(config(&id)),
            )
            .await,
        );
        assert!(!config_exists(gw, &id).await, "{role} created a config");
    }
    for role in [Role::Engine, Role::Viewer, Role::Listener, Role::Operator] {
        let id = format!("s-{role}");
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/servers",
                Some(tokens.get(role)),
                Some(json!({"id": id})),
            )
            .await,
        );
        let (status, _, _) = call(
            gw,
            Method::GET,
            &format!("/v1/servers/{id}"),
            Some(tokens.get(Role::Admin)),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{role} registered a server");
    }
    flue.register("web1").await;
    let (status, _, _) = call(
        gw,
        Method::POST,
        "/v1/configs",
        Some(tokens.get(Role::Engine)),
        Some(config("c")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for role in [Role::Admin, Role::Viewer, Role::Listener] {
        forbidden(
            &call(
                gw,
                Method::POST,
                "/v1/deployments",
                Some(tokens.get(role)),
                Some(json!({"config_id": "c", "server_id": "web1"})),
            )
            .await,
        );
    }
    let (_, _, listed) = call(
        gw,
        Method::GET,
        "/v1/servers/web1/deployments",
        Some(tokens.get(Role::Viewer)),
        None,
    )
    .await;
    assert_eq!(listed, json!([]), "a refused deployment was queued");
    // Reads and the rest of each role's limits.
    for (role, method, path) in [
        (Role::Listener, Method::GET, "/v1/deployments"),
        (Role::Listener, Method::GET, "/v1/servers"),
        (Role::Operator, Method::GET, "/v1/servers"),
        (Role::Operator, Method::GET, "/v1/events"),
        (Role::Engine, Method::POST, "/v1/tokens"),
        (Role::Viewer, Method::DELETE, "/v1/tokens/abc"),
        (Role::Engine, Method::DELETE, "/v1/servers/web1"),
        (Role::Engine, Method::GET, "/v1/webhooks"),
        (Role::Viewer, Method::POST, "/v1/webhooks"),
        (Role::Admin, Method::POST, "/v1/tenants/default/tokens"),
        (Role::Viewer, Method::PUT, "/v1/stacks/s"),
    ] {
        forbidden(
            &call(
                gw,
                method.clone(),
                path,
                Some(tokens.get(role)),
                Some(json!({})),
            )
            .await,
        );
    }
    let (status, _, _) = call(
        gw,
        Method::GET,
        "/v1/servers/web1",
        Some(tokens.get(Role::Viewer)),
        None,
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the engine's refused DELETE deregistered web1"
    );
}

#[tokio::test]
async fn another_tenants_token_gets_404_and_never_learns_whether_an_object_exists() {
    let flue = Flue::start().await;
    let secret = flue.gateway.tokens().secret().to_vec();
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        Some(flue.gateway.tokens().get(Role::Engine)),
        Some(config("exists")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let other = token::sign(&secret, claims("other")).expect("sign").token;
    let (status, _, there) = call(
        &flue.gateway,
        Method::GET,
        "/v1/configs/exists",
        Some(&other),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{there}");
    let (status, _, missing) = call(
        &flue.gateway,
        Method::GET,
        "/v1/configs/missing",
        Some(&other),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        there, missing,
        "the answers tell an existing object from a missing one"
    );
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/configs",
        Some(&other),
        Some(config("theirs")),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        !config_exists(&flue.gateway, "theirs").await,
        "another tenant wrote here"
    );
}

#[tokio::test]
async fn flue_gateway_token_mints_offline_and_an_operator_mints_only_a_tenant_admin() {
    let flue = Flue::start().await;
    let state = flue.gateway.state_dir().display().to_string();
    let mint = |role: &str| {
        let out = std::process::Command::new(bin("flue-gateway"))
            .args([
                "token",
                "--state-dir",
                &state,
                "--role",
                role,
                "--ttl",
                "1h",
                "--name",
                "ops",
            ])
            .output()
            .expect("run flue-gateway token");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert_eq!(text.lines().count(), 1, "only the token: {text:?}");
        text.trim().to_owned()
    };
    let operator = mint("operator");
    forbidden_everywhere_but_tenants(&flue.gateway, &operator).await;
    let (status, _, minted) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/default/tokens",
        Some(&operator),
        Some(json!({"role": "admin", "ttl_secs": 600, "name": "first-admin"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{minted}");
    let admin = minted["token"].as_str().expect("token");
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/servers",
        Some(admin),
        Some(json!({"id": "s1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/elsewhere/tokens",
        Some(&operator),
        Some(json!({"role": "admin", "ttl_secs": 600, "name": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = call(
        &flue.gateway,
        Method::POST,
        "/v1/tenants/default/tokens",
        Some(&operator),
        Some(json!({"role": "engine", "ttl_secs": 600, "name": "x"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // An offline admin token works as one.
    let offline_admin = mint("admin");
    let (status, _, _) = call(
        &flue.gateway,
        Method::POST,
        "/v1/servers",
        Some(&offline_admin),
        Some(json!({"id": "s2"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
}

async fn forbidden_everywhere_but_tenants(gateway: &Gateway, operator: &str) {
    for (method, path) in [
        (Method::GET, "/v1/servers"),
        (Method::POST, "/v1/configs"),
        (Method::POST, "/v1/tokens"),
    ] {
        let (status, _, body) = call(gateway, method, path, Some(operator), Some(json!({}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
}
