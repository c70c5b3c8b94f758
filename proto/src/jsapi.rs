//! NATS's own subjects Flue's broker permissions name: the JetStream API (also addressed
//! through Flue's JetStream domain), acknowledgements, flow control, KV and the system
//! account's claim updates. Flue's subjects are in [`crate::subject`].
//!
//! Every JetStream API subject comes in two spellings, `$JS.API.…` (a client on the hub
//! itself) and `$JS.flue.API.…` (a client addressing the hub's domain [`JS_DOMAIN`], the
//! only way that works behind a leaf node); both reach the same API on the hub, so a
//! permission grants both or neither.

/// The hub broker's JetStream domain (`jetstream { domain: flue }`).
pub const JS_DOMAIN: &str = "flue";

/// Subject the system account publishes account JWT updates on (a request: the broker
/// answers whether it took the JWT).
pub const CLAIMS_UPDATE: &str = "$SYS.REQ.CLAIMS.UPDATE";

/// Subject every server of the broker answers with its own health check (one answer from
/// a single server, one from each node of a cluster), asked over a system-account
/// connection: it reports a stream that keeps a write error until nats-server restarts.
pub const SERVER_HEALTHZ: &str = "$SYS.REQ.SERVER.PING.HEALTHZ";

/// Subject nats-server announces each closed client connection of `account` on (a
/// `DisconnectEventMsg`, to the system account; sent by every node of a cluster for its
/// own clients). The gateway follows its tenants' accounts for presence.
pub fn account_disconnects(account: &str) -> String {
    format!("$SYS.ACCOUNT.{account}.DISCONNECT")
}

/// Subject one account's JWT updates are published on (a request, like [`CLAIMS_UPDATE`]).
/// The gateway pushes here rather than on [`CLAIMS_UPDATE`] so that a tenant network's leaf
/// node, whose system user may subscribe to this subject for its own account only, learns
/// the update (a revocation) at once and never sees another account's.
pub fn account_claims_update(account: &str) -> String {
    format!("$SYS.REQ.ACCOUNT.{account}.CLAIMS.UPDATE")
}

/// The JetStream API prefixes: `$JS.API` and `$JS.<domain>.API`.
pub fn api_prefixes() -> [String; 2] {
    ["$JS.API".to_owned(), format!("$JS.{JS_DOMAIN}.API")]
}

/// `<prefix>.<rest>` for both API prefixes.
pub fn api(rest: &str) -> [String; 2] {
    api_prefixes().map(|p| format!("{p}.{rest}"))
}

/// The account's JetStream info (`$JS.API.INFO`): an account that imports it answers the
/// JetStream API through its imports only (nats-server then gives it no system import of
/// `$JS.API.>`, the "JetStream not enabled" answer, nor the domain mappings).
pub fn account_info() -> [String; 2] {
    api("INFO")
}

/// Reading one consumer's info.
pub fn consumer_info(stream: &str, consumer: &str) -> [String; 2] {
    api(&format!("CONSUMER.INFO.{stream}.{consumer}"))
}

/// Pulling the next messages of one consumer.
pub fn consumer_next(stream: &str, consumer: &str) -> [String; 2] {
    api(&format!("CONSUMER.MSG.NEXT.{stream}.{consumer}"))
}

/// Acknowledging messages of one consumer (`$JS.ACK.<stream>.<consumer>.>`; acks carry no
/// domain).
pub fn consumer_acks(stream: &str, consumer: &str) -> String {
    format!("$JS.ACK.{stream}.{consumer}.>")
}

/// Creating the consumer `name` on `stream` (`CONSUMER.CREATE.<stream>.<name>`, with or
/// without a filter subject after it), and nothing else: a consumer name is one subject
/// token, so the broker can confine a user to exact names.
pub fn consumer_create_named(stream: &str, name: &str) -> Vec<String> {
    let mut subjects = api(&format!("CONSUMER.CREATE.{stream}.{name}")).to_vec();
    subjects.extend(api(&format!("CONSUMER.CREATE.{stream}.{name}.>")));
    subjects
}

/// Creating any consumer of `stream` by name, without and with a filter subject after it
/// (the import covering every listener's [`consumer_create_named`]).
pub fn consumer_create_any(stream: &str) -> [[String; 2]; 2] {
    [
        api(&format!("CONSUMER.CREATE.{stream}.*")),
        api(&format!("CONSUMER.CREATE.{stream}.*.>")),
    ]
}

/// Deleting the consumer `name` of `stream`.
pub fn consumer_delete(stream: &str, name: &str) -> [String; 2] {
    api(&format!("CONSUMER.DELETE.{stream}.{name}"))
}

/// Reading a stream's info.
pub fn stream_info(stream: &str) -> [String; 2] {
    api(&format!("STREAM.INFO.{stream}"))
}

/// Direct get of any message of `stream` (`DIRECT.GET.<stream>` and its
/// last-by-subject form `DIRECT.GET.<stream>.<subject>`), and the non-direct message get.
pub fn stream_get(stream: &str) -> Vec<String> {
    let mut subjects = api(&format!("DIRECT.GET.{stream}")).to_vec();
    subjects.extend(api(&format!("DIRECT.GET.{stream}.>")));
    subjects.extend(api(&format!("STREAM.MSG.GET.{stream}")));
    subjects
}

/// The stream behind KV bucket `bucket`.
pub fn kv_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// Direct get of the last value of the keys matching `key_filter` in `bucket`: the only
/// read whose subject names the key (so a permission can confine it to some keys).
pub fn kv_get(bucket: &str, key_filter: &str) -> [String; 2] {
    let stream = kv_stream(bucket);
    api(&format!("DIRECT.GET.{stream}.$KV.{bucket}.{key_filter}"))
}

/// Put and delete subjects of the keys matching `key_filter` in `bucket`, as published
/// directly (`$KV.<bucket>.<key>`) and through a domain context, which async-nats prefixes
/// with the API prefix (`$JS.<domain>.API.$KV.<bucket>.<key>`).
pub fn kv_put(bucket: &str, key_filter: &str) -> [String; 2] {
    [
        kv_watch(bucket, key_filter),
        format!("$JS.{JS_DOMAIN}.API.$KV.{bucket}.{key_filter}"),
    ]
}

/// The core subject of the keys matching `key_filter` in `bucket`: subscribing to it
/// sees every put (a wait for a key without a consumer).
pub fn kv_watch(bucket: &str, key_filter: &str) -> String {
    format!("$KV.{bucket}.{key_filter}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_subjects_come_in_both_spellings() {
        assert_eq!(
            consumer_info("FLUE_REQ", "req-1-t-s"),
            [
                "$JS.API.CONSUMER.INFO.FLUE_REQ.req-1-t-s",
                "$JS.flue.API.CONSUMER.INFO.FLUE_REQ.req-1-t-s"
            ]
        );
        assert_eq!(consumer_acks("FLUE_REQ", "c"), "$JS.ACK.FLUE_REQ.c.>");
        assert_eq!(
            kv_get("flue_data", "t.st.>")[1],
            "$JS.flue.API.DIRECT.GET.KV_flue_data.$KV.flue_data.t.st.>"
        );
        assert_eq!(kv_put("flue_data", "t.st.>")[0], "$KV.flue_data.t.st.>");
    }
}
