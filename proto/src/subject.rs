//! Subject, stream and consumer names: the one place that spells them.
//!
//! | subject | stream |
//! |---|---|
//! | `flue.<tenant>.req.<server>` | [`REQUEST_STREAM`] |
//! | `flue.<tenant>.resp.<server>` | [`RESPONSE_STREAM`] |

use crate::ids::{ServerId, TenantId};

/// Stream holding deployment requests, one subject per server, Limits retention.
pub const REQUEST_STREAM: &str = "FLUE_REQ";
/// Subjects captured by [`REQUEST_STREAM`].
pub const REQUEST_SUBJECTS: &str = "flue.*.req.*";
/// Stream holding agent responses (started, result).
pub const RESPONSE_STREAM: &str = "FLUE_RESP";
/// Subjects captured by [`RESPONSE_STREAM`].
pub const RESPONSE_SUBJECTS: &str = "flue.*.resp.*";
/// Durable pull consumer on [`RESPONSE_STREAM`] shared by every gateway replica.
pub const GATEWAY_RESPONSE_CONSUMER: &str = "flue-gateway";

/// Subject of a server's request queue.
pub fn request(tenant: &TenantId, server: &ServerId) -> String {
    format!("flue.{tenant}.req.{server}")
}

/// Subject an agent publishes its responses on.
pub fn response(tenant: &TenantId, server: &ServerId) -> String {
    format!("flue.{tenant}.resp.{server}")
}

/// Name of the durable pull consumer the gateway creates for one server's requests.
///
/// Ids may contain `-` and `_`, so joining tenant and server with a separator could
/// make two servers of different tenants share a consumer; the tenant's length prefix
/// makes the name unambiguous.
pub fn request_consumer(tenant: &TenantId, server: &ServerId) -> String {
    format!("req-{}-{tenant}-{server}", tenant.as_str().len())
}

/// Inbox prefix an agent uses for its request/reply traffic, so that broker
/// permissions can confine it to its own replies.
pub fn agent_inbox_prefix(tenant: &TenantId, server: &ServerId) -> String {
    format!("_INBOX_flue.{tenant}.{server}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::new(s).expect("valid")
    }
    fn s(x: &str) -> ServerId {
        ServerId::new(x).expect("valid")
    }

    #[test]
    fn subjects_have_the_documented_shape() {
        assert_eq!(request(&t("acme"), &s("web1")), "flue.acme.req.web1");
        assert_eq!(response(&t("acme"), &s("web1")), "flue.acme.resp.web1");
        assert_eq!(
            agent_inbox_prefix(&t("acme"), &s("web1")),
            "_INBOX_flue.acme.web1"
        );
    }

    #[test]
    fn consumer_names_never_collide_across_tenants() {
        let a = request_consumer(&t("a_b"), &s("c"));
        let b = request_consumer(&t("a"), &s("b_c"));
        assert_ne!(a, b);
        assert_eq!(a, "req-3-a_b-c");
    }
}
