//! A heartbeat as the gateway's presence reads it from core NATS (`presence::follow`).
#![no_main]

use flue_fuzz::{assert_id, assert_subject, round_trips};
use flue_proto::{Heartbeat, subject};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(beat) = serde_json::from_slice::<Heartbeat>(data) else {
        return;
    };
    round_trips(&beat);
    assert_id(beat.tenant.as_str());
    assert_id(beat.server.as_str());
    // The gateway compares the payload's server with the subject it came on.
    assert_subject(&subject::heartbeat(&beat.tenant, &beat.server));
});
