//! What the API accepts is readable, fits the broker and can run: nesting depth, sizes
//! against the broker's max payload, and the `script` group's environment.

mod depth;
mod env;
mod size;
mod undecodable;

use flue_proto::ErrorBody;
use reqwest::StatusCode;

/// Sends `req` and checks the error: status, stable code, and a message containing
/// every one of `needles`.
async fn expect_error(
    req: reqwest::RequestBuilder,
    status: StatusCode,
    code: &str,
    needles: &[&str],
) {
    let resp = req.send().await.expect("send");
    assert_eq!(resp.status(), status);
    let body: ErrorBody = resp.json().await.expect("a JSON error body");
    assert_eq!(body.error.code, code, "{body:?}");
    for needle in needles {
        assert!(
            body.error.message.contains(needle),
            "message {:?} should mention {needle:?}",
            body.error.message
        );
    }
}
