//! Cost grows with the work, not with history: a restarted gateway reads only pending
//! deployments, and the listings are served page by page from indexes, by cursor.

use flue_proto::{DeploymentId, DeploymentStatus, NEXT_CURSOR_HEADER, ServerId};
use flue_tests::{Flue, WAIT};
use serde_json::Value;

/// One page: the items and the cursor of the next one.
async fn page(flue: &Flue, path: &str) -> (Vec<Value>, Option<String>) {
    let response = flue
        .http()
        .get(format!("{}{path}", flue.gateway.url()))
        .send()
        .await
        .expect("list");
    assert_eq!(response.status(), 200, "{path}");
    let next = response
        .headers()
        .get(NEXT_CURSOR_HEADER)
        .map(|v| v.to_str().expect("ascii").to_owned());
    let items: Vec<Value> = response.json().await.expect("json array");
    (items, next)
}

/// Every page of `base` (ending in `?` or `&`) by `limit`: the pages' lengths and the ids.
async fn walk(flue: &Flue, base: &str, limit: usize) -> (Vec<usize>, Vec<String>) {
    let (mut sizes, mut ids) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("{base}limit={limit}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (items, next) = page(flue, &path).await;
        sizes.push(items.len());
        ids.extend(
            items
                .iter()
                .map(|d| d["id"].as_str().expect("id").to_owned()),
        );
        match next {
            Some(n) => cursor = Some(n),
            None => return (sizes, ids),
        }
    }
}

/// A 400 `invalid_query` whose message names `field`.
async fn refused(flue: &Flue, path: &str, field: &str) {
    let response = flue
        .http()
        .get(format!("{}{path}", flue.gateway.url()))
        .send()
        .await
        .expect("list");
    assert_eq!(response.status(), 400, "{path}");
    let body: Value = response.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "invalid_query", "{path}: {body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains(field), "{path}: {message}");
}

/// Hex of `text`, as the gateway's cursors are made (a forged one, here).
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_gateway_restarted_after_500_finished_and_3_pending_deployments_reads_only_the_3_and_finishes_them()
 {
    let mut flue = Flue::start().await;
    flue.register("s1").await;
    flue.register("s2").await;
    flue.script_config("c", "#!/bin/sh\necho \"hi $tag\"\n", &["tag"], &[])
        .await;
    let _agent = flue.agent("s1", &[]).await;
    let mut done = Vec::new();
    for i in 0..500 {
        done.push(
            flue.deploy("c", "s1", &[("tag", &format!("t{i}"))])
                .await
                .id,
        );
    }
    for id in &done {
        assert_eq!(flue.finished(id).await.status, DeploymentStatus::Complete);
    }
    // s2 has no agent yet: these stay QUEUED across the restart.
    let mut pending = Vec::new();
    for i in 0..3 {
        pending.push(
            flue.deploy("c", "s2", &[("tag", &format!("p{i}"))])
                .await
                .id,
        );
    }

    let from = flue.gateway.logs().len();
    flue.gateway.restart().await;
    let recovered = flue
        .gateway
        .logs()
        .wait_for_after(from, "deployment state recovered", WAIT)
        .await;
    assert!(recovered.contains("read=3"), "{recovered}");
    assert!(recovered.contains("pending=3"), "{recovered}");
    assert!(recovered.contains("indexed=false"), "{recovered}");

    // Summaries unless asked for output.
    let (summaries, _) = page(&flue, "/v1/deployments?server=s1&limit=2").await;
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0]["deploy_stdout"], "", "{}", summaries[0]);
    assert_eq!(summaries[0]["status"], "COMPLETE");
    let (whole, _) = page(&flue, "/v1/deployments?server=s1&limit=2&include=output").await;
    assert_eq!(whole[0]["deploy_stdout"], "hi t0\n", "{}", whole[0]);

    let _agent2 = flue.agent("s2", &[]).await;
    for id in &pending {
        assert_eq!(flue.finished(id).await.status, DeploymentStatus::Complete);
    }
}

#[tokio::test]
async fn deployments_are_listed_by_pages_of_100_each_exactly_once_in_creation_order() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.register("s2").await;
    flue.script_config("c", "#!/bin/sh\ntrue\n", &[], &[]).await;
    let mut created: Vec<DeploymentId> = Vec::new();
    for i in 0..250 {
        // Every tenth on the other server: the server filter has something to leave out.
        let server = if i % 10 == 9 { "s2" } else { "s1" };
        created.push(flue.deploy("c", server, &[]).await.id);
    }
    let created: Vec<String> = created.iter().map(|id| id.to_string()).collect();

    let (sizes, listed) = walk(&flue, "/v1/deployments?", 100).await;
    assert_eq!(sizes, vec![100, 100, 50]);
    assert_eq!(listed, created, "every id once, in creation order");

    let (_, of_s2) = walk(&flue, "/v1/deployments?server=s2&", 100).await;
    let expected: Vec<String> = created.iter().skip(9).step_by(10).cloned().collect();
    assert_eq!(of_s2, expected);
    // A server's own listing comes in pages too, from the same index.
    let (sizes, of_s2) = walk(&flue, "/v1/servers/s2/deployments?", 10).await;
    assert_eq!((sizes, &of_s2), (vec![10, 10, 5], &expected));
    let all_of_s1 = flue
        .client()
        .list_server_deployments(&ServerId::new("s1").expect("id"))
        .await
        .expect("client follows the pages");
    assert_eq!(all_of_s1.len(), 225);
    refused(&flue, "/v1/servers/s2/deployments?limit=0", "limit").await;
    let (queued, _) = page(&flue, "/v1/deployments?status=QUEUED&limit=5").await;
    assert_eq!(queued.len(), 5);
    let (complete, _) = page(&flue, "/v1/deployments?status=COMPLETE&limit=5").await;
    assert!(complete.is_empty());

    for bad in ["0", "1001", "ten", "-1"] {
        refused(&flue, &format!("/v1/deployments?limit={bad}"), "limit").await;
    }
    refused(&flue, "/v1/deployments?status=DONE", "status").await;
    refused(&flue, "/v1/deployments?include=everything", "include").await;
    refused(&flue, "/v1/deployments?cursor=not-a-cursor", "cursor").await;
    refused(&flue, "/v1/deployments?cursor=abc", "cursor").await;
    // Another tenant's cursor (the gateway's own format, another tenant's name) is
    // refused, not read from: nothing of this tenant comes back.
    let other = hex("deployments:another-tenant:1");
    refused(&flue, &format!("/v1/deployments?cursor={other}"), "cursor").await;
    // A servers cursor is not a deployments one.
    let (_, servers_next) = page(&flue, "/v1/servers?limit=1").await;
    let servers_cursor = servers_next.expect("two servers: a next page");
    refused(
        &flue,
        &format!("/v1/deployments?cursor={servers_cursor}"),
        "cursor",
    )
    .await;
}

#[tokio::test]
async fn servers_are_listed_by_pages_in_registration_order_and_a_deregistered_one_drops_out() {
    let flue = Flue::start().await;
    let names: Vec<String> = (0..23).map(|i| format!("srv-{i:02}")).collect();
    for name in &names {
        flue.register(name).await;
    }
    let (sizes, listed) = walk(&flue, "/v1/servers?", 10).await;
    assert_eq!(sizes, vec![10, 10, 3]);
    assert_eq!(listed, names);

    let admin = flue.admin_client();
    let gone = ServerId::new("srv-05").expect("id");
    admin.delete_server(&gone).await.expect("deregister");
    let (_, listed) = walk(&flue, "/v1/servers?", 10).await;
    let expected: Vec<String> = names.iter().filter(|n| *n != "srv-05").cloned().collect();
    assert_eq!(listed, expected);
    // Registered again: at the end, once.
    flue.register("srv-05").await;
    let (_, listed) = walk(&flue, "/v1/servers?", 10).await;
    let mut expected = expected;
    expected.push("srv-05".to_owned());
    assert_eq!(listed, expected);
    // The client follows the pages.
    let all = admin.list_servers().await.expect("list");
    assert_eq!(all.len(), 23);
    assert!(all.iter().all(|s| s.presence.is_some()));
    let first = admin.list_servers_up_to(4).await.expect("list");
    assert_eq!(first.len(), 4);

    refused(&flue, "/v1/servers?limit=1001", "limit").await;
    refused(&flue, "/v1/servers?cursor=zz", "cursor").await;
    refused(&flue, "/v1/servers?colour=blue", "colour").await;
}
