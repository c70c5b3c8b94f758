//! A request as an agent reads it from its queue (`flue-agent`'s `deploy::handle`).
#![no_main]

use flue_fuzz::{assert_id, assert_subject, round_trips};
use flue_proto::{DeploymentRequest, subject};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = serde_json::from_slice::<DeploymentRequest>(data) else {
        return;
    };
    round_trips(&req);
    assert_id(req.tenant.as_str());
    assert_id(req.server.as_str());
    assert_id(req.deployment_id.as_str());
    assert_id(req.config.id.as_str());
    assert_subject(&req.msg_id());
    assert_subject(&subject::request(&req.tenant, &req.server));
    // What the agent asks of the config before it runs a hook.
    let _ = req.config.allows(&req.action);
    let _ = req.config.body_for(&req.action);
});
