//! A scripted fake gateway on a loopback socket, shared by the client and CLI tests.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A fake gateway answering each request with the next canned `(status, body)` and
/// recording request lines (`GET /path?query HTTP/1.1`).
pub struct Fake {
    /// The fake's base URL (`http://127.0.0.1:<port>`).
    pub url: String,
    /// Request lines seen so far, in order.
    pub seen: Arc<Mutex<Vec<String>>>,
}

/// Starts a fake that answers the requests it gets with `answers`, in order.
pub async fn fake(answers: Vec<(u16, String)>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for (status, body) in answers {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let head = read_request(&mut socket).await;
            let line = head.lines().next().unwrap_or_default().to_owned();
            log.lock().expect("lock").push(line);
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.expect("write");
        }
    });
    Fake { url, seen }
}

/// Reads one request's head and its body (by content-length) and returns the head.
async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.expect("read");
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length = text[..end]
            .lines()
            .filter_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().expect("length"))
            })
            .next()
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return text[..end].to_owned();
        }
    }
}

/// A deployment record `d1` on server `web` with `status`.
pub fn deployment(status: &str) -> String {
    deployment_with(status, json!({}))
}

/// A deployment record `d1` on server `web` with `status` and the `extra` fields.
pub fn deployment_with(status: &str, extra: Value) -> String {
    let mut record = json!({
        "id": "d1", "tenant": "default", "server_id": "web", "config_id": "c1",
        "group": "script", "name": "d1", "action": "CREATE", "status": status,
        "timeout_secs": 60,
        "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:00Z",
        "expires_at": "2025-01-01T00:01:00Z"
    });
    if let (Some(record), Value::Object(extra)) = (record.as_object_mut(), extra) {
        record.extend(extra);
    }
    record.to_string()
}
