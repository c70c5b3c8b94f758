//! The JSON bodies of the HTTP API, decoded the way the gateway's `JsonBody` extractor
//! does (`axum::Json::from_bytes`), then checked as its handlers check them. The first
//! byte picks the body type, the rest is the body.
#![no_main]

use axum::Json;
use flue_fuzz::{assert_id, round_trips};
use flue_gateway::webhooks::target::Target;
use flue_proto::webhook::CreateWebhook;
use flue_proto::{ConfigId, ConfigSpec, CreateDeployment, PutStack, RegisterServer};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            let Some(spec) = decode::<ConfigSpec>(body) else {
                return;
            };
            if spec.validate().is_ok() {
                let id = spec.id.clone().unwrap_or_else(ConfigId::random);
                let config = spec.into_config(id, time::OffsetDateTime::UNIX_EPOCH);
                round_trips(&config);
            }
        }
        1 => {
            if let Some(create) = decode::<CreateDeployment>(body) {
                assert_id(create.config_id.as_str());
                assert_id(create.server_id.as_str());
            }
        }
        2 => {
            decode::<PutStack>(body);
        }
        3 => {
            if let Some(register) = decode::<RegisterServer>(body) {
                assert_id(register.id.as_str());
            }
        }
        _ => {
            let Some(hook) = decode::<CreateWebhook>(body) else {
                return;
            };
            if let Ok(target) = Target::parse(&hook.url) {
                // Credentials in a target would be shown by every read of the subscription.
                assert!(!target.authority.contains('@'), "{target:?}");
                assert!(!target.host.is_empty() && target.port != 0, "{target:?}");
                assert!(target.path_and_query.starts_with('/'), "{target:?}");
            }
        }
    }
});

/// The body as the extractor decodes it; one that decodes must round-trip.
fn decode<T>(body: &[u8]) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let Json(value) = Json::<T>::from_bytes(body).ok()?;
    round_trips(&value);
    Some(value)
}
