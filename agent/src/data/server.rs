//! The data socket: a unix socket (mode 0600) the agent serves only while a hook runs,
//! answering one JSON response line per JSON request line.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::MAX_VALUE_BYTES;
use super::space::DataSpace;
use super::wire::{DataRequest, DataResponse};

/// Longest request line read: a value of [`MAX_VALUE_BYTES`] even if every byte had to be
/// escaped (`\u0001`), plus room for the rest.
pub const MAX_REQUEST_BYTES: usize = 6 * MAX_VALUE_BYTES + 4096;
/// Room in `sockaddr_un.sun_path` on Linux, the terminating NUL included.
pub const SUN_PATH_LEN: usize = 108;
/// Pause after a failed accept (out of file descriptors, say) so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The data socket of the running hook; stop it (or drop it) when the hook is done.
#[derive(Debug)]
pub struct DataServer {
    path: PathBuf,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl DataServer {
    /// Serves `space` at `path`, replacing a stale socket file a crash may have left.
    /// `None`, with a warning, when the socket cannot be made: the hook still runs, and
    /// `flue-agent data` then says it cannot connect.
    pub fn start(path: &Path, space: DataSpace) -> Option<DataServer> {
        if path.as_os_str().len() >= SUN_PATH_LEN {
            warn!(
                path = %path.display(),
                limit = SUN_PATH_LEN - 1,
                "data socket path too long for a unix socket; hooks get no data space (use a shorter --state-dir)"
            );
            return None;
        }
        let listener = match bind(path) {
            Ok(listener) => listener,
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot serve the data socket; hooks get no data space");
                return None;
            }
        };
        // The socket is ours, so its owner is this process's user.
        let owner = std::fs::metadata(path).map(|m| m.uid()).ok();
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, space, owner, stop.clone()));
        Some(DataServer {
            path: path.to_owned(),
            stop,
            task: Some(task),
        })
    }

    /// Stops serving (requests in progress are dropped) and removes the socket file.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            warn!(error = %e, "the data socket task failed");
        }
        // Drop removes the file.
    }
}

impl Drop for DataServer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(path = %self.path.display(), error = %e, "cannot remove the data socket");
        }
    }
}

/// Binds `path` after removing what is there, and makes it reachable by its owner only.
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

async fn accept_loop(
    listener: UnixListener,
    space: DataSpace,
    owner: Option<u32>,
    stop: CancellationToken,
) {
    // Dropped when the loop ends, which aborts every connection still served.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, space.clone(), owner));
                }
                Err(e) => {
                    warn!(error = %e, "accepting on the data socket failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
}

/// Answers the requests of one connection, in order, until it closes.
async fn serve(stream: UnixStream, space: DataSpace, owner: Option<u32>) {
    // Mode 0600 keeps other users out; this also refuses one that connected in the
    // moment between bind and chmod.
    match stream.peer_cred() {
        Ok(cred) if Some(cred.uid()) == owner || cred.uid() == 0 => {}
        Ok(cred) => {
            warn!(
                uid = cred.uid(),
                "data socket connection from another user refused"
            );
            return;
        }
        Err(e) => {
            warn!(error = %e, "cannot tell who connected to the data socket; refused");
            return;
        }
    }
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = (MAX_REQUEST_BYTES + 1) as u64;
        match (&mut read).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "reading from the data socket failed");
                return;
            }
        }
        let too_long = line.len() > MAX_REQUEST_BYTES;
        let response = if too_long {
            DataResponse::error(format!(
                "request longer than {MAX_REQUEST_BYTES} bytes refused"
            ))
        } else {
            match serde_json::from_slice::<DataRequest>(&line) {
                Ok(req) => space.handle(req).await,
                Err(e) => DataResponse::error(format!("unreadable request: {e}")),
            }
        };
        let mut out = match serde_json::to_vec(&response) {
            Ok(out) => out,
            Err(e) => {
                warn!(error = %e, "cannot encode a data socket response");
                return;
            }
        };
        out.push(b'\n');
        if let Err(e) = write.write_all(&out).await {
            debug!(error = %e, "writing to the data socket failed");
            return;
        }
        if too_long {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use tokio::io::AsyncBufReadExt;

    /// A space whose broker is never reached: without a stack, no request gets that far.
    async fn stackless_space() -> DataSpace {
        let mut config = Config::new("t".parse().expect("id"), "s".parse().expect("id"));
        config.nats_url = "nats://127.0.0.1:1".into();
        let broker = crate::connect::connect(&config, None, None)
            .await
            .expect("client");
        DataSpace::new(&broker, config.tenant, None)
    }

    /// Sends `lines` and collects the answers. Write errors are ignored: the server may
    /// close the connection before reading everything (an oversized request).
    async fn ask(path: &Path, lines: &[&str]) -> Vec<serde_json::Value> {
        let stream = UnixStream::connect(path).await.expect("connect");
        let (read, mut write) = stream.into_split();
        let send = async {
            for line in lines {
                write.write_all(line.as_bytes()).await?;
                write.write_all(b"\n").await?;
            }
            write.shutdown().await
        };
        let _ = send.await;
        let mut answers = Vec::new();
        let mut read = BufReader::new(read).lines();
        while let Some(line) = read.next_line().await.expect("read") {
            answers.push(serde_json::from_str(&line).expect("json answer"));
        }
        answers
    }

    #[tokio::test]
    async fn serves_a_private_socket_only_while_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data.sock");
        std::fs::write(&path, "stale").expect("stale file");
        let server = DataServer::start(&path, stackless_space().await).expect("serves");
        let mode = std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let answers = ask(
            &path,
            &[
                r#"{"op":"get","key":"k"}"#,
                "not json",
                r#"{"op":"delete","key":"k"}"#,
            ],
        )
        .await;
        assert_eq!(answers.len(), 3, "{answers:?}");
        let no_stack = serde_json::json!({"status": "error", "message": "this deployment is not part of a stack"});
        assert_eq!(answers[0], no_stack);
        assert_eq!(answers[1]["status"], "error");
        let unreadable = answers[1]["message"].as_str().unwrap_or_default();
        assert!(unreadable.starts_with("unreadable request"), "{unreadable}");
        assert_eq!(answers[2], no_stack);

        server.stop().await;
        assert!(
            !path.exists(),
            "the socket is removed when the hook is done"
        );
    }

    #[tokio::test]
    async fn an_oversized_request_is_refused_and_the_connection_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data.sock");
        let _server = DataServer::start(&path, stackless_space().await).expect("serves");
        let huge = format!(
            r#"{{"op":"put","key":"k","value":"{}"}}"#,
            "x".repeat(MAX_REQUEST_BYTES)
        );
        let answers = ask(&path, &[&huge, r#"{"op":"get","key":"k"}"#]).await;
        assert_eq!(answers.len(), 1, "{answers:?}");
        let message = answers[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("longer than"), "{message}");
    }

    #[tokio::test]
    async fn a_path_too_long_for_a_unix_socket_serves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("d".repeat(SUN_PATH_LEN)).join("data.sock");
        assert!(DataServer::start(&path, stackless_space().await).is_none());
    }
}
