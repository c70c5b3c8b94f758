//! HTTP/1.1 over a bare `TcpStream`, for clients that misbehave on purpose.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection to the gateway at `base` (`http://127.0.0.1:PORT`).
pub async fn connect(base: &str) -> TcpStream {
    let addr = base.strip_prefix("http://").expect("http base url");
    TcpStream::connect(addr)
        .await
        .expect("connect to the gateway")
}

/// Writes `bytes` as they are.
pub async fn send(stream: &mut TcpStream, bytes: &str) {
    stream
        .write_all(bytes.as_bytes())
        .await
        .expect("write to the gateway");
}

/// An answer read off the socket.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// The head, lowercased.
    pub head: String,
    /// The body (the gateway always sends a `Content-Length`).
    pub body: serde_json::Value,
}

/// Reads one answer, for at most `limit`.
pub async fn answer(stream: &mut TcpStream, limit: Duration) -> Answer {
    tokio::time::timeout(limit, read_answer(stream))
        .await
        .unwrap_or_else(|_| panic!("no answer within {limit:?}"))
        .expect("connection closed before an answer")
}

/// Reads one answer, for at most `limit`; none if the connection closes first.
pub async fn try_answer(stream: &mut TcpStream, limit: Duration) -> Option<Answer> {
    tokio::time::timeout(limit, read_answer(stream))
        .await
        .ok()
        .flatten()
}

async fn read_answer(stream: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no content-length in {head:?}"));
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.expect("read the body");
        assert!(n > 0, "connection closed in the body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or_else(|e| {
        panic!(
            "body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&buf)
        )
    });
    Some(Answer { status, head, body })
}

/// Waits (at most `limit`) until the gateway closes the connection, reading and
/// discarding anything it still sends; true when it closed, false when time ran out.
pub async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let fut = async {
        let mut chunk = [0_u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, fut).await.is_ok()
}
