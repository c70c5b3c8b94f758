//! A tenant's edge account: where its agents and its leaf nodes' remote user live, apart
//! from its state (issue 22; measured in `docs/design/edge-accounts.md`).
//!
//! nats-server does not check a request's reply subject against the sender's rights, so a
//! user of the account holding the streams could have the broker's answer to any request
//! it may make stored in any stream of that account (a reply naming a KV key) or run any
//! JetStream call (a reply naming `$JS.API.STREAM.DELETE.…`). The edge account has no
//! JetStream and reaches the state account only through the service imports below, one per
//! service an agent uses: an answer to one of its requests is delivered back into the edge
//! account, where nothing is stored, and `$JS.ACK.`/`_R_.` replies are refused to clients.
//!
//! - The state account exports [`services`] (public exports: only the operator, the
//!   gateway's state directory, signs accounts, so no other account can import them).
//! - The edge account imports each in both JetStream API spellings: publish permissions
//!   are checked on the subject as published, and an account importing `$JS.API.INFO`
//!   gets no domain mapping (nor nats-server's own `$JS.API.>` import answering
//!   "JetStream not enabled", which would race the imported answers).
//! - The state account also exports the tenant's data keys' puts as a stream
//!   ([`data_puts`]) and the edge account imports it: an agent waiting for a key hears a
//!   put made in the state account (by the gateway) at once, not only at its next re-read.
//!   No loop with the service import of the same subject (the agents' puts): a message the
//!   stream import delivers into the edge account is not carried back by its service
//!   imports (measured: `docs/design/edge-accounts.md`, "The data keys' puts exported";
//!   held by `data_space::a_hook_waiting_for_a_key_wakes_on_a_put_made_in_the_state_account`).
//! - A leaf node preloads [`stub_state_jwt`] for the state account: its imports then fail
//!   at once and it makes none (a real one would make the leaf announce interest in
//!   JetStream API subjects, which the hub refuses by closing the link; none would make
//!   it fetch the account once per import).

use flue_proto::TenantId;
use flue_proto::jsapi;
use flue_proto::subject::{self, DATA_BUCKET, REQUEST_STREAM};
use flue_proto::upgrade::{BUILDS_BUCKET, tenant_builds_filter};
use nkeys::KeyPair;

use super::jwt::{self, Account, AccountLimits, Claims, Export, Import};

/// One service an agent uses: its subject in the state account and, for the JetStream
/// API and KV puts, the subject a client of Flue's JetStream domain publishes instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// A name for people (shown in the account JWTs).
    pub name: &'static str,
    /// The subject in the state account (`$JS.API.…`, `$JS.ACK.…`, `$KV.…`, `flue.…`).
    pub subject: String,
    /// The same service as published through the domain (`$JS.flue.API.…`).
    pub domain: Option<String>,
    /// Whether one request may get several answers (a pull of a batch).
    pub streamed: bool,
}

impl Service {
    fn pair(name: &'static str, [subject, domain]: [String; 2]) -> Self {
        Self {
            name,
            subject,
            domain: Some(domain),
            streamed: false,
        }
    }

    fn plain(name: &'static str, subject: String) -> Self {
        Self {
            name,
            subject,
            domain: None,
            streamed: false,
        }
    }
}

/// The services of `tenant`'s state account its agents use. Each agent's user is confined
/// to its own consumer, subjects and stacks' keys by its permissions
/// ([`super::perms::agent`]); these cover every agent of the tenant.
pub fn services(tenant: &TenantId) -> Vec<Service> {
    let [info, _] = jsapi::account_info();
    let data_keys = format!("{tenant}.>");
    let builds = jsapi::kv_stream(BUILDS_BUCKET);
    let data = jsapi::kv_stream(DATA_BUCKET);
    vec![
        Service::plain("jetstream info", info),
        Service {
            streamed: true,
            ..Service::pair("pull", jsapi::consumer_next(REQUEST_STREAM, "*"))
        },
        Service::pair("consumer info", jsapi::consumer_info(REQUEST_STREAM, "*")),
        Service::plain("acks", jsapi::consumer_acks(REQUEST_STREAM, "*")),
        Service::plain("answers", subject::tenant_responses(tenant)),
        Service::plain("heartbeats", subject::tenant_heartbeats(tenant)),
        Service::pair("builds info", jsapi::stream_info(&builds)),
        Service::pair(
            "builds get",
            jsapi::kv_get(BUILDS_BUCKET, &tenant_builds_filter(tenant)),
        ),
        Service::pair("data info", jsapi::stream_info(&data)),
        Service::pair("data get", jsapi::kv_get(DATA_BUCKET, &data_keys)),
        Service::pair("data put", jsapi::kv_put(DATA_BUCKET, &data_keys)),
    ]
}

/// The subject of every put of `tenant`'s data keys (`$KV.flue_data.<tenant>.>`), which
/// the state account exports as a stream into the edge account.
pub fn data_puts(tenant: &TenantId) -> String {
    jsapi::kv_watch(DATA_BUCKET, &format!("{tenant}.>"))
}

/// The name of the [`data_puts`] export and import.
const DATA_PUTS: &str = "data puts";

/// The state account's exports: [`services`], and the stream of [`data_puts`].
pub fn exports(tenant: &TenantId) -> Vec<Export> {
    let mut exports: Vec<Export> = services(tenant)
        .into_iter()
        .map(|s| match s.streamed {
            true => Export::streamed_service(s.name, s.subject),
            false => Export::service(s.name, s.subject),
        })
        .collect();
    exports.push(Export::stream(DATA_PUTS, data_puts(tenant)));
    exports
}

/// The edge account's imports from the state account `state` (its public key): every
/// service of [`services`], once as is and once under its domain spelling, and the stream
/// of [`data_puts`].
pub fn imports(tenant: &TenantId, state: &str) -> Vec<Import> {
    let mut imports = Vec::new();
    for service in services(tenant) {
        let import = |local_subject| Import {
            name: service.name.to_owned(),
            subject: service.subject.clone(),
            account: state.to_owned(),
            local_subject,
            kind: "service".to_owned(),
        };
        imports.push(import(None));
        if let Some(domain) = &service.domain {
            imports.push(import(Some(domain.clone())));
        }
    }
    imports.push(Import {
        name: DATA_PUTS.to_owned(),
        subject: data_puts(tenant),
        account: state.to_owned(),
        local_subject: None,
        kind: "stream".to_owned(),
    });
    imports
}

/// The JWT of the state account `state` a tenant's leaf node preloads: no exports, no
/// JetStream, issued at unix second 1, so that a broker holding the real one (pushed by
/// the gateway, always newer) never takes it, and the leaf, which never hears the state
/// account's updates, keeps it.
pub fn stub_state_jwt(
    operator: &KeyPair,
    state: &str,
    tenant: &TenantId,
) -> Result<String, jwt::JwtError> {
    let account = Account::new(AccountLimits::unlimited_without_jetstream());
    let mut claims = Claims::new(state, format!("{tenant} (stub for leaf nodes)"), account);
    jwt::encode(operator, &mut claims, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jetstream_service_is_imported_in_both_spellings_and_nothing_reaches_a_queue() {
        let tenant: TenantId = "acme".parse().expect("id");
        let imports = imports(&tenant, "ASTATE");
        let local: Vec<&str> = imports
            .iter()
            .map(|i| i.local_subject.as_deref().unwrap_or(&i.subject))
            .collect();
        for subject in [
            "$JS.API.INFO",
            "$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.*",
            "$JS.flue.API.CONSUMER.MSG.NEXT.FLUE_REQ.*",
            "$JS.flue.API.CONSUMER.INFO.FLUE_REQ.*",
            "$JS.ACK.FLUE_REQ.*.>",
            "flue.acme.resp.*",
            "flue.acme.hb.*",
            "$KV.flue_data.acme.>",
            "$JS.flue.API.$KV.flue_data.acme.>",
            "$JS.flue.API.DIRECT.GET.KV_flue_data.$KV.flue_data.acme.>",
            "$JS.flue.API.DIRECT.GET.KV_flue_builds.$KV.flue_builds.acme.>",
        ] {
            assert!(
                local.contains(&subject),
                "{subject} not imported: {local:?}"
            );
        }
        // Domain spellings map to the state account's own subjects.
        let put = imports
            .iter()
            .find(|i| i.local_subject.as_deref() == Some("$JS.flue.API.$KV.flue_data.acme.>"))
            .expect("the domain put");
        assert_eq!(put.subject, "$KV.flue_data.acme.>");
        assert!(imports.iter().all(|i| i.account == "ASTATE"));
        // No request subject, no stream or consumer management, no other tenant.
        for s in &local {
            assert!(!s.contains(".req."), "{s}");
            assert!(!s.contains("STREAM.DELETE") && !s.contains("CREATE"), "{s}");
            assert!(!s.contains("FLUE_RESP") && !s.contains("FLUE_EVT"), "{s}");
        }
        let exports = exports(&tenant);
        assert_eq!(exports.len(), services(&tenant).len() + 1);
        // One stream, both ways: the data keys' puts.
        let streams = |kinds: Vec<(&str, &str)>| {
            kinds
                .into_iter()
                .filter(|(kind, _)| *kind == "stream")
                .map(|(_, s)| s.to_owned())
                .collect::<Vec<_>>()
        };
        let exported = streams(
            exports
                .iter()
                .map(|e| (e.kind.as_str(), e.subject.as_str()))
                .collect(),
        );
        let imported = streams(
            imports
                .iter()
                .map(|i| (i.kind.as_str(), i.subject.as_str()))
                .collect(),
        );
        assert_eq!(exported, ["$KV.flue_data.acme.>"]);
        assert_eq!(imported, exported);
        let streamed: Vec<&str> = exports
            .iter()
            .filter(|e| e.response_type.is_some())
            .map(|e| e.subject.as_str())
            .collect();
        assert_eq!(streamed, ["$JS.API.CONSUMER.MSG.NEXT.FLUE_REQ.*"]);
    }
}
