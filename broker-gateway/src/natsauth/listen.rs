//! A tenant's listener account: where its event listeners' users live, apart from the
//! events account that holds `FLUE_EVT` (issue 22; measured in
//! `docs/design/edge-accounts.md`, "Listeners").
//!
//! A user of an account holding streams can have the broker's answer to any request it
//! may make stored in any stream of that account (a reply naming `flue.<t>.evt.…`) or run
//! any JetStream call (a reply naming `$JS.API.STREAM.DELETE.FLUE_EVT`). The listener
//! account has no JetStream and reaches the events account only through the imports
//! below; an answer to one of its requests is delivered back into the listener account,
//! where nothing is stored.
//!
//! - The events account exports [`routes`] as services and the tenant's events as a
//!   stream (plain subscriptions to `flue.<t>.evt.>` keep working).
//! - The listener account imports each JetStream service in both API spellings and
//!   `$JS.API.INFO` (so nats-server gives it neither its own "JetStream not enabled"
//!   answer nor the domain mappings, as for the edge account, [`super::edge`]).
//! - A consumer creation is **not** imported as the JetStream call: it arrives on
//!   [`flue_proto::subject::listener_creates`] in the events account, where the gateway
//!   checks the consumer's configuration and makes it ([`super::creates`]). A consumer
//!   made through a chained import would run with whatever configuration the listener
//!   sent: a push consumer delivering into the events account on a subject it chose.

use flue_proto::TenantId;
use flue_proto::event::{EVENT_STREAM, tenant_events};
use flue_proto::jsapi;
use flue_proto::subject::listener_creates;

use super::jwt::{Export, Import};

/// One service the events account exports to listeners: its subject there, the subjects
/// a listener publishes for it, and whether one request may get several answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// A name for people (shown in the account JWTs).
    pub name: &'static str,
    /// The subject in the events account.
    pub subject: String,
    /// The subjects listeners publish on (both JetStream API spellings, or the subject
    /// itself).
    pub local: Vec<String>,
    /// Whether one request may get several answers (a pull of a batch, a batch get).
    pub streamed: bool,
}

impl Route {
    fn pair(name: &'static str, [subject, domain]: [String; 2]) -> Self {
        Self {
            name,
            local: vec![subject.clone(), domain],
            subject,
            streamed: false,
        }
    }

    fn streamed(self) -> Self {
        Self {
            streamed: true,
            ..self
        }
    }
}

/// The services of `tenant`'s events account its listeners use. Each listener's user is
/// confined to its own consumers by its permissions ([`super::perms::listener`]).
pub fn routes(tenant: &TenantId) -> Vec<Route> {
    let [info, _] = jsapi::account_info();
    let creates = listener_creates(tenant);
    let [[plain, plain_domain], [filtered, filtered_domain]] =
        jsapi::consumer_create_any(EVENT_STREAM);
    let direct = jsapi::api(&format!("DIRECT.GET.{EVENT_STREAM}"));
    let by_subject = jsapi::api(&format!("DIRECT.GET.{EVENT_STREAM}.>"));
    let message = jsapi::api(&format!("STREAM.MSG.GET.{EVENT_STREAM}"));
    vec![
        Route {
            name: "jetstream info",
            local: vec![info.clone()],
            subject: info,
            streamed: false,
        },
        Route {
            name: "consumer create",
            subject: format!("{creates}.*"),
            local: vec![plain, plain_domain],
            streamed: false,
        },
        Route {
            name: "consumer create filtered",
            subject: format!("{creates}.*.>"),
            local: vec![filtered, filtered_domain],
            streamed: false,
        },
        Route::pair("pull", jsapi::consumer_next(EVENT_STREAM, "*")).streamed(),
        Route::pair("consumer info", jsapi::consumer_info(EVENT_STREAM, "*")),
        Route::pair("consumer delete", jsapi::consumer_delete(EVENT_STREAM, "*")),
        Route {
            name: "acks",
            subject: jsapi::consumer_acks(EVENT_STREAM, "*"),
            local: vec![jsapi::consumer_acks(EVENT_STREAM, "*")],
            streamed: false,
        },
        Route::pair("stream info", jsapi::stream_info(EVENT_STREAM)),
        Route::pair("stream names", jsapi::api("STREAM.NAMES")),
        Route::pair("direct get", direct).streamed(),
        Route::pair("direct get by subject", by_subject),
        Route::pair("message get", message),
    ]
}

/// The events account's exports: [`routes`] and the tenant's events as a stream.
pub fn exports(tenant: &TenantId) -> Vec<Export> {
    let mut exports: Vec<Export> = routes(tenant)
        .into_iter()
        .map(|r| match r.streamed {
            true => Export::streamed_service(r.name, r.subject),
            false => Export::service(r.name, r.subject),
        })
        .collect();
    exports.push(Export::stream("events", tenant_events(tenant)));
    exports
}

/// The listener account's imports from the events account `events` (its public key):
/// every route under each of its local subjects, and the events stream.
pub fn imports(tenant: &TenantId, events: &str) -> Vec<Import> {
    let mut imports = Vec::new();
    for route in routes(tenant) {
        for local in &route.local {
            imports.push(Import {
                name: route.name.to_owned(),
                subject: route.subject.clone(),
                account: events.to_owned(),
                local_subject: (*local != route.subject).then(|| local.clone()),
                kind: "service".to_owned(),
            });
        }
    }
    imports.push(Import {
        name: "events".to_owned(),
        subject: tenant_events(tenant),
        account: events.to_owned(),
        local_subject: None,
        kind: "stream".to_owned(),
    });
    imports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_import_reads_of_flue_evt_and_creations_only_through_the_gateway() {
        let tenant: TenantId = "acme".parse().expect("id");
        let imports = imports(&tenant, "AEVENTS");
        let local: Vec<&str> = imports
            .iter()
            .map(|i| i.local_subject.as_deref().unwrap_or(&i.subject))
            .collect();
        for subject in [
            "$JS.API.INFO",
            "$JS.API.CONSUMER.CREATE.FLUE_EVT.*",
            "$JS.flue.API.CONSUMER.CREATE.FLUE_EVT.*.>",
            "$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_EVT.*",
            "$JS.API.CONSUMER.DELETE.FLUE_EVT.*",
            "$JS.ACK.FLUE_EVT.*.>",
            "$JS.flue.API.STREAM.INFO.FLUE_EVT",
            "$JS.flue.API.STREAM.MSG.GET.FLUE_EVT",
            "$JS.flue.API.DIRECT.GET.FLUE_EVT",
            "flue.acme.evt.>",
        ] {
            assert!(
                local.contains(&subject),
                "{subject} not imported: {local:?}"
            );
        }
        // Creations reach the gateway's subject, never the JetStream API.
        for import in imports
            .iter()
            .filter(|i| i.name.starts_with("consumer create"))
        {
            assert!(
                import.subject.starts_with("flue.acme.lsn.create."),
                "{import:?}"
            );
        }
        assert!(imports.iter().all(|i| i.account == "AEVENTS"));
        for import in &imports {
            let s = &import.subject;
            assert!(
                !s.contains("CONSUMER.NAMES") && !s.contains("STREAM.DELETE"),
                "{s}"
            );
            assert!(
                !s.contains("STREAM.PURGE") && !s.contains("CONSUMER.CREATE"),
                "{s}"
            );
            assert!(
                !s.starts_with("$JS.FC."),
                "no push consumer's flow control: {s}"
            );
        }
        let exports = exports(&tenant);
        assert_eq!(exports.len(), routes(&tenant).len() + 1);
        let streams: Vec<&str> = exports
            .iter()
            .filter(|e| e.kind == "stream")
            .map(|e| e.subject.as_str())
            .collect();
        assert_eq!(streams, ["flue.acme.evt.>"]);
    }
}
