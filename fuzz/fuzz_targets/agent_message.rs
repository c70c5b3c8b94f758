//! An agent's answer as the gateway reads it from `FLUE_RESP` (`responses::handle`).
#![no_main]

use flue_fuzz::{assert_id, assert_subject, round_trips};
use flue_proto::{AgentMessage, ServerId, TenantId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = serde_json::from_slice::<AgentMessage>(data) else {
        return;
    };
    round_trips(&message);
    if let Some(id) = message.deployment_id() {
        assert_id(id.as_str());
    }
    let tenant = TenantId::new("t").expect("valid");
    let server = ServerId::new("s").expect("valid");
    // The de-duplication id is built from decoded fields (progress sequence numbers too).
    assert_subject(&message.msg_id(&tenant, &server));
});
