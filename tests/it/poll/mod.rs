//! Servers that poll with the stock os-collect-config instead of running a flue-agent:
//! registration, the secret metadata and signal URLs, and one real poll cycle through the
//! stock tools (os-collect-config → os-refresh-config → os-apply-config → 55-heat-config →
//! the stock `script` hook → heat-config-notify).

mod cli;
mod refusals;
mod stock;

use flue_proto::poll::{PollAccess, Transport};
use flue_proto::{RegisterServer, ServerId};
use flue_tests::Flue;

/// Registers `server` as a polling server; returns its metadata URL and snippet.
async fn register_polling(flue: &Flue, server: &str) -> PollAccess {
    let registration = flue
        .admin_client()
        .register_server(&RegisterServer {
            transport: Transport::Poll,
            id: ServerId::new(server).expect("server id"),
            name: String::new(),
        })
        .await
        .expect("register a polling server");
    assert!(
        registration.agent.is_none(),
        "a polling server has no agent"
    );
    assert!(registration.credentials.is_none(), "nor broker credentials");
    registration
        .poll
        .expect("the first registration hands out the metadata URL")
}

/// A client without a token: what a polling server has.
fn anonymous() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("http client")
}
