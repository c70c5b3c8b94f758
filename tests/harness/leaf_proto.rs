//! The leaf node protocol spoken by hand (nats-server's `server/leafnode.go`): a test
//! holding a tenant network's `leaf.creds` links to the hub as a leaf node would, and sends
//! what a leaf node of its own could (`LS+`, `LMSG` with any reply).

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use flue_proto::creds::UserCreds;
use nkeys::KeyPair;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::WAIT;

/// What the hub sent on the link: a protocol line (`-ERR …`, `PONG`, `LS+ …`), or a
/// message with its subject, reply and bytes (headers and body).
#[derive(Debug, Clone)]
pub enum Event {
    /// A protocol line.
    Line(String),
    /// A message (`LMSG` or `HMSG`).
    Msg {
        /// Its subject.
        subject: String,
        /// Its reply subject.
        reply: Option<String>,
        /// Its headers and body.
        payload: Vec<u8>,
    },
    /// The hub closed the link.
    Closed,
}

/// One leaf connection to the hub, made by hand: `INFO` read, `CONNECT` sent with the leaf
/// user's JWT and the hub's nonce signed by its seed. A task reads what the hub sends
/// (answering its `PING`s).
pub struct LeafLink {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    events: mpsc::UnboundedReceiver<Event>,
    /// Every protocol line the hub sent, kept for failure messages.
    seen: Arc<Mutex<Vec<String>>>,
}

impl LeafLink {
    /// Links to the hub's leaf node port `addr` as `creds`; returns once the hub answered
    /// a `PING` sent after the `CONNECT` (the link is admitted).
    pub async fn open(addr: &str, creds: &UserCreds) -> LeafLink {
        let stream = TcpStream::connect(addr).await.expect("leaf node port");
        let (read, write) = stream.into_split();
        let mut read = BufReader::new(read);
        let mut info = String::new();
        tokio::time::timeout(WAIT, read.read_line(&mut info))
            .await
            .expect("INFO in time")
            .expect("read INFO");
        let info: serde_json::Value = serde_json::from_str(
            info.strip_prefix("INFO ")
                .unwrap_or_else(|| panic!("not an INFO: {info}")),
        )
        .expect("INFO is JSON");
        let nonce = info["nonce"].as_str().expect("the hub sends a nonce");
        let key = KeyPair::from_seed(&creds.seed).expect("seed");
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(key.sign(nonce.as_bytes()).expect("signed"));
        let connect = serde_json::json!({
            "jwt": creds.jwt,
            "sig": sig,
            "name": "attacker",
            "server_id": KeyPair::new_server().public_key(),
            "headers": true,
        });
        let writer = Arc::new(tokio::sync::Mutex::new(write));
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(read_link(read, writer.clone(), tx, seen.clone()));
        let mut link = LeafLink {
            writer,
            events,
            seen,
        };
        link.send(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())
            .await;
        let pong = link
            .until(|e| matches!(e, Event::Line(l) if l == "PONG" || l.starts_with("-ERR")))
            .await;
        assert!(
            matches!(&pong, Some(Event::Line(l)) if l == "PONG"),
            "the hub did not admit the leaf user: {pong:?}, {:?}",
            link.seen()
        );
        link
    }

    /// Writes raw protocol bytes (a failed write shows in the events).
    pub async fn send(&self, bytes: &[u8]) {
        let mut writer = self.writer.lock().await;
        // A link the hub closed fails later writes: what the hub said is in the events.
        let _ = writer.write_all(bytes).await;
    }

    /// `LMSG subject [reply] size` and the body.
    pub async fn lmsg(&self, subject: &str, reply: Option<&str>, body: &[u8]) {
        let mut frame = match reply {
            Some(reply) => format!("LMSG {subject} {reply} {}\r\n", body.len()),
            None => format!("LMSG {subject} {}\r\n", body.len()),
        }
        .into_bytes();
        frame.extend_from_slice(body);
        frame.extend_from_slice(b"\r\n");
        self.send(&frame).await;
    }

    /// The first event `wanted` takes (none when the link closed or nothing came in
    /// [`WAIT`]).
    pub async fn until(&mut self, wanted: impl Fn(&Event) -> bool) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(Event::Closed)) | Ok(None) | Err(_) => return None,
                Ok(Some(event)) if wanted(&event) => return Some(event),
                Ok(Some(_)) => {}
            }
        }
    }

    /// What the hub says to `LMSG subject` (no reply, an empty body) until it closes the
    /// link: its `-ERR`s, or `"accepted"` when it answered a `PING` sent after it.
    pub async fn refusal_of(&mut self, subject: &str) -> String {
        self.lmsg(subject, None, b"").await;
        self.send(b"PING\r\n").await;
        let mut errors = Vec::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(Event::Line(l))) if l.starts_with("-ERR") => errors.push(l),
                Ok(Some(Event::Line(l))) if l == "PONG" && errors.is_empty() => {
                    return "accepted".to_owned();
                }
                Ok(Some(Event::Closed)) | Ok(None) => return errors.join("\n"),
                Err(_) => return format!("no answer in time; {}", errors.join("\n")),
                Ok(Some(_)) => {}
            }
        }
    }

    /// Every protocol line the hub has sent so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Reads the hub's side of a leaf link into `tx`, answering `PING` with `PONG`.
async fn read_link(
    mut read: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    tx: mpsc::UnboundedSender<Event>,
    seen: Arc<Mutex<Vec<String>>>,
) {
    loop {
        let mut line = String::new();
        match read.read_line(&mut line).await {
            Ok(0) | Err(_) => {
                let _ = tx.send(Event::Closed);
                return;
            }
            Ok(_) => {}
        }
        let line = line.trim_end().to_owned();
        if line == "PING" {
            let _ = writer.lock().await.write_all(b"PONG\r\n").await;
            continue;
        }
        let event = if let Some(rest) = line
            .strip_prefix("LMSG ")
            .or_else(|| line.strip_prefix("HMSG "))
        {
            let args: Vec<&str> = rest.split_whitespace().collect();
            let size: usize = args.last().and_then(|s| s.parse().ok()).expect("a size");
            let mut payload = vec![0; size + 2];
            if read.read_exact(&mut payload).await.is_err() {
                let _ = tx.send(Event::Closed);
                return;
            }
            payload.truncate(size);
            let headers = line.starts_with("HMSG");
            let reply = match (args.len(), headers) {
                (3, false) | (4, true) => Some(args[1].to_owned()),
                _ => args
                    .iter()
                    .position(|a| *a == "+")
                    .map(|i| args[i + 1].to_owned()),
            };
            Event::Msg {
                subject: args[0].to_owned(),
                reply,
                payload,
            }
        } else {
            seen.lock().expect("lock").push(line.clone());
            Event::Line(line)
        };
        if tx.send(event).is_err() {
            return;
        }
    }
}
