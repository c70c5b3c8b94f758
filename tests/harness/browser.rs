//! Headless Chromium driven over the DevTools protocol, for the dashboard's end-to-end test.
//!
//! Chromium is started with `--remote-debugging-pipe`: it reads protocol messages (JSON,
//! each ended by a NUL byte) from its fd 3 and writes its answers and events to fd 4. A
//! `sh` wrapper moves our pipes there (`3<&0 4>&1`), so no unsafe code is needed, and
//! starts it in a process group of its own, which is killed on drop with every helper
//! process Chromium forked.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::{Logs, WAIT};

/// How often [`Page::wait_for`] re-evaluates its condition.
const POLL: Duration = Duration::from_millis(50);

/// The Chromium to run: `$FLUE_CHROMIUM`, else `chromium` on the `PATH`.
///
/// Panics with the install command when there is none, so the test fails saying why.
pub fn chromium_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLUE_CHROMIUM") {
        let path = PathBuf::from(p);
        assert!(
            path.is_file(),
            "FLUE_CHROMIUM is {}, which does not exist",
            path.display()
        );
        return path;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium is not installed: the dashboard test needs Debian's `chromium` \
                 (`apt-get install -y chromium`; `bash scripts/test.sh` installs it when run \
                 as root), or set FLUE_CHROMIUM to a Chromium binary"
            )
        })
}

/// A headless Chromium with a fresh profile; killed, helpers included, on drop.
pub struct Browser {
    child: Child,
    pgid: u32,
    to_browser: ChildStdin,
    from_browser: mpsc::UnboundedReceiver<Value>,
    next_id: u64,
    stderr: Logs,
    _profile: TempDir,
}

impl Browser {
    /// Starts Chromium with a 1280×900 window and a new empty profile.
    pub async fn launch() -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" --remote-debugging-pipe 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(chromium_bin())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--hide-scrollbars",
                "--mute-audio",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", chromium_bin().display()));
        let pgid = child.id().expect("chromium running");
        let stderr = Logs::default();
        stderr.capture(child.stderr.take().expect("stderr"));
        let to_browser = child.stdin.take().expect("stdin");
        let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, from_browser) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut message = Vec::new();
            while let Ok(n) = reader.read_until(0, &mut message).await {
                if n == 0 {
                    break;
                }
                message.pop_if(|b| *b == 0);
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    break;
                }
                message.clear();
            }
        });
        Browser {
            child,
            pgid,
            to_browser,
            from_browser,
            next_id: 0,
            stderr,
            _profile: profile,
        }
    }

    /// Sends one protocol command (to a page when `session` is set) and returns its
    /// `result`; panics on a protocol error or when no answer comes within [`WAIT`].
    pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("serialise a command");
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .await
            .unwrap_or_else(|e| panic!("send {method} to chromium: {e}"));
        let answer = tokio::time::timeout(WAIT, async {
            // Events (no `id`) and answers to nothing we wait for are skipped.
            while let Some(m) = self.from_browser.recv().await {
                if m.get("id").and_then(Value::as_u64) == Some(id) {
                    return Some(m);
                }
            }
            None
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} from chromium within {WAIT:?}"))
        .unwrap_or_else(|| {
            panic!(
                "chromium closed its pipe; stderr: {:?}",
                self.stderr.lines()
            )
        });
        if let Some(error) = answer.get("error") {
            panic!("{method} failed: {error}");
        }
        answer["result"].clone()
    }

    /// Opens a new 1280×900 tab on `url` (only `127.0.0.1` in tests) and attaches to it.
    pub async fn open(&mut self, url: &str) -> Page<'_> {
        let target = self
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().expect("targetId").to_owned();
        let attached = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        let session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned();
        let mut page = Page {
            browser: self,
            session,
        };
        // The window's size less its (invisible) frame varies; the page's does not.
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
        let nav = page.call("Page.navigate", json!({"url": url})).await;
        if let Some(error) = nav.get("errorText") {
            panic!("cannot open {url}: {error}");
        }
        page
    }

    /// What Chromium printed on stderr.
    pub fn logs(&self) -> &Logs {
        &self.stderr
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: the browser, its zygotes, renderers and utility processes.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.pgid)])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.start_kill();
    }
}

/// One tab of a [`Browser`].
pub struct Page<'b> {
    browser: &'b mut Browser,
    session: String,
}

impl Page<'_> {
    /// Sends a protocol command to this tab.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.browser.call(Some(&self.session), method, params).await
    }

    /// The value of a JavaScript expression (promises awaited); panics on an exception.
    pub async fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .await
            .unwrap_or_else(|e| panic!("{expression} threw: {e}"))
    }

    /// The value of a JavaScript expression, or the exception it threw.
    pub async fn try_eval(&mut self, expression: &str) -> Result<Value, String> {
        let answer = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        match answer.get("exceptionDetails") {
            Some(e) => Err(e["exception"]["description"]
                .as_str()
                .map_or_else(|| e.to_string(), str::to_owned)),
            None => Ok(answer["result"]["value"].clone()),
        }
    }

    /// Re-evaluates `expression` every 50 ms until it gives something other than
    /// `null`, `false` or nothing, for at most `limit`; returns that value. An exception
    /// counts as "not yet" (the page may still be loading) and is reported on timeout.
    pub async fn wait_for(&mut self, what: &str, limit: Duration, expression: &str) -> Value {
        let mut last_error = None;
        let found = tokio::time::timeout(limit, async {
            let mut tick = tokio::time::interval(POLL);
            loop {
                tick.tick().await;
                match self.try_eval(expression).await {
                    Ok(Value::Null | Value::Bool(false)) => {}
                    Ok(v) => return v,
                    Err(e) => last_error = Some(e),
                }
            }
        })
        .await;
        match found {
            Ok(v) => v,
            Err(_) => {
                let body = self
                    .try_eval("document.body && document.body.innerText")
                    .await;
                panic!(
                    "timed out after {limit:?} waiting for {what} ({expression}); \
                     last exception: {last_error:?}; the page shows:\n{body:?}"
                )
            }
        }
    }

    /// A PNG of what the tab shows.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot is base64")
    }

    /// Saves a screenshot to `path` and returns its bytes.
    pub async fn save_screenshot(&mut self, path: &Path) -> Vec<u8> {
        let png = self.screenshot().await;
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        png
    }
}
