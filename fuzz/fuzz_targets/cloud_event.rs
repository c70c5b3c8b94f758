//! An event as listeners read it from `FLUE_EVT` (the gateway's SSE and webhook readers,
//! `flue events` / `flue watch`), and its `data` as the payload struct of its kind.
#![no_main]

use flue_fuzz::{assert_id, assert_subject, round_trips};
use flue_proto::event::{
    DeploymentEventData, MemberEventData, ProgressEventData, ServerEventData, StackEventData,
};
use flue_proto::{CloudEvent, EventFilter, EventKind, EventType};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

fuzz_target!(|data: &[u8]| {
    let Ok(event) = serde_json::from_slice::<CloudEvent>(data) else {
        return;
    };
    round_trips(&event);
    assert_id(event.tenant.as_str());
    let subject = event.nats_subject();
    assert_subject(&subject);
    assert_eq!(event.ty.to_string().parse::<EventType>(), Ok(event.ty));
    assert_eq!(event.ty.short().parse::<EventType>(), Ok(event.ty));
    // Every filter the event passes must let its subject through the broker's filter,
    // or a listener would never see an event it asked for.
    for filter in filters_matching(&event) {
        assert!(filter.matches(&event));
        let wanted = filter.subject_filter(&event.tenant);
        assert!(
            subject_matches(&wanted, &subject),
            "{subject:?} does not pass {wanted:?} although the event matches {filter:?}"
        );
    }
    match event.ty.kind() {
        EventKind::Server => data_round_trips::<ServerEventData>(&event),
        EventKind::Group => data_round_trips::<MemberEventData>(&event),
        EventKind::Deployment if event.ty == EventType::DeploymentProgress => {
            data_round_trips::<ProgressEventData>(&event)
        }
        EventKind::Deployment => data_round_trips::<DeploymentEventData>(&event),
        EventKind::Stack => data_round_trips::<StackEventData>(&event),
    }
});

/// Every combination of the event's own type and ids as a filter.
fn filters_matching(event: &CloudEvent) -> Vec<EventFilter> {
    (0..16u8)
        .map(|bits| EventFilter {
            types: if bits & 1 != 0 {
                vec![event.ty]
            } else {
                vec![]
            },
            server: event.server.clone().filter(|_| bits & 2 != 0),
            stack: event.stack.clone().filter(|_| bits & 4 != 0),
            deployment: event.deployment.clone().filter(|_| bits & 8 != 0),
        })
        .collect()
}

/// NATS subject matching: `*` matches one token, `>` the rest (at least one token).
fn subject_matches(filter: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for want in filter.split('.') {
        match (want, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (w, Some(t)) if w == t => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

/// The data as its kind's payload, the way `flue watch` reads it; one that fits must
/// round-trip.
fn data_round_trips<T>(event: &CloudEvent)
where
    T: serde::Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(data) = serde_json::from_value::<T>(event.data.clone()) {
        round_trips(&data);
    }
}
