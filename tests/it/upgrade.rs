//! Agent upgrades over the request queue (`docs/agent.md`, "Upgrading agents"): real
//! agents running from a copy of the workspace's `flue-agent` (build id `dev`), upgraded
//! to a second real build (`0.1.0+next`, built by `scripts/test.sh`) signed by a release
//! key made with `flue release keygen`, through `flue server upgrade`.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use flue_proto::upgrade::{AgentBuild, CHUNK_SIZE, UPGRADE_GROUP, sha256_hex};
use flue_proto::{ConfigSpec, CreateDeployment, DeploymentStatus, ServerId};
use flue_tests::{Agent, Flue, WAIT, bin, write_executable};

use crate::security::flue_cli;

const OLD: &str = "0.1.0+dev";
const NEXT: &str = "0.1.0+next";

/// An agent build `scripts/test.sh` makes besides the workspace's (`flue-agent-next`, this
/// tree with build id `next`; `flue-agent-previous`, the previous release's); its absence
/// fails the test, saying how to make it.
fn extra_build(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("flue-upgrade")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: `bash scripts/test.sh` builds it before the tests",
        path.display()
    );
    path
}

fn next_build() -> PathBuf {
    extra_build("flue-agent-next")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn sha_of(path: &Path) -> String {
    sha256_hex(&std::fs::read(path).expect("read binary"))
}

/// `flue server upgrade web1` to `build` signed by `manifest`.
async fn upgrade(flue: &Flue, build: &Path, manifest: &Path) -> Output {
    flue_cli(
        flue,
        &[
            "server",
            "upgrade",
            "web1",
            "--build",
            &build.display().to_string(),
            "--manifest",
            &manifest.display().to_string(),
            "--timeout-secs",
            "120",
        ],
    )
    .await
}

/// A copy of the workspace's agent at `<scratch>/<dir>/flue-agent`.
fn copy_agent(flue: &Flue, dir: &str) -> PathBuf {
    let bin_dir = flue.path(dir);
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    let exe = bin_dir.join("flue-agent");
    std::fs::copy(bin("flue-agent"), &exe).expect("copy the agent");
    exe
}

/// `flue release keygen` writing `seed`: the public key.
async fn keygen(flue: &Flue, seed: &Path) -> String {
    let seed_arg = seed.display().to_string();
    let out = flue_cli(flue, &["release", "keygen", "--seed-file", &seed_arg]).await;
    assert!(out.status.success(), "{}", text(&out));
    let public = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(public.starts_with('C'), "a release public key: {public}");
    public
}

/// A Flue with one server, `web1`, whose agent runs from `<scratch>/bin/flue-agent` (a
/// copy of the workspace's build) with the release key made here.
struct Setup {
    flue: Flue,
    agent: Agent,
    exe: PathBuf,
    seed: PathBuf,
}

impl Setup {
    async fn start() -> Setup {
        let flue = Flue::start().await;
        let exe = copy_agent(&flue, "bin");
        let seed = flue.path("release.seed");
        let public = keygen(&flue, &seed).await;
        let agent = flue
            .spawn_agent_program(
                exe.clone(),
                "web1",
                "agent-web1",
                &[],
                &["--release-key", &public],
            )
            .await;
        agent.ready().await;
        Setup {
            flue,
            agent,
            exe,
            seed,
        }
    }

    /// `flue release sign` of `build` as `version` with `seed`: the manifest's path.
    async fn sign(&self, build: &Path, version: &str, seed: &Path, name: &str) -> PathBuf {
        let out = flue_cli(
            &self.flue,
            &[
                "release",
                "sign",
                "--seed-file",
                &seed.display().to_string(),
                "--agent-version",
                version,
                &build.display().to_string(),
            ],
        )
        .await;
        assert!(out.status.success(), "{}", text(&out));
        let path = self.flue.path(name);
        std::fs::write(&path, &out.stdout).expect("write manifest");
        path
    }

    async fn upgrade(&self, build: &Path, manifest: &Path) -> Output {
        upgrade(&self.flue, build, manifest).await
    }

    /// Waits until the gateway shows `web1`'s agent at `version` (its heartbeats say it).
    async fn shows_version(&self, version: &str) {
        let client = self.flue.client();
        let id = ServerId::new("web1").expect("id");
        let wait = async {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let server = client.get_server(&id).await.expect("read server");
                if server.presence.and_then(|p| p.agent_version).as_deref() == Some(version) {
                    return;
                }
            }
        };
        tokio::time::timeout(WAIT, wait)
            .await
            .unwrap_or_else(|_| panic!("web1 never showed agent version {version}"));
    }

    /// A `script` deployment still runs on web1.
    async fn still_deploys(&self, id: &str) {
        self.flue.script_config(id, "echo fine", &[], &[]).await;
        let d = self.flue.deploy(id, "web1", &[]).await;
        let d = self.flue.finished(&d.id).await;
        assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    }

    /// Nothing of an upgrade is left beside the agent or in its state dir.
    fn nothing_staged(&self) {
        let staged = flue_agent::upgrade::staged_path(&self.exe);
        assert!(!staged.exists(), "{} left behind", staged.display());
        let marker = self.flue.path("agent-web1").join("upgrade.json");
        assert!(!marker.exists(), "the upgrade marker left behind");
    }
}

#[tokio::test]
async fn an_agent_upgrades_itself_to_a_signed_build_in_place_and_reports_its_version() {
    let setup = Setup::start().await;
    let next = next_build();
    setup.shows_version(OLD).await;
    let old_sha = sha_of(&setup.exe);
    let pid = setup.agent.pid().expect("running");
    let manifest = setup.sign(&next, NEXT, &setup.seed, "next.json").await;

    let out = setup.upgrade(&next, &manifest).await;
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(&format!("web1: upgraded: upgraded from {OLD} to {NEXT}")),
        "{said}"
    );
    // Installed in place of the old build, which is kept beside it; the same process
    // (systemd's view of it) runs the new one.
    assert_eq!(sha_of(&setup.exe), sha_of(&next));
    assert_eq!(
        sha_of(&flue_agent::upgrade::previous_path(&setup.exe)),
        old_sha
    );
    assert_eq!(
        setup.agent.pid(),
        Some(pid),
        "upgraded by exec, same process"
    );
    setup.nothing_staged();
    setup.shows_version(NEXT).await;
    setup.still_deploys("after-upgrade").await;

    // The same command again (a resumed rollout) adopts what is done: nothing runs twice.
    let again = setup.upgrade(&next, &manifest).await;
    let said = text(&again);
    assert!(again.status.success(), "{said}");
    assert!(
        said.contains(&format!("upgraded from {OLD} to {NEXT}")),
        "{said}"
    );
    let runs = setup
        .flue
        .client()
        .list_server_deployments(&ServerId::new("web1").expect("id"))
        .await
        .expect("list")
        .into_iter()
        .filter(|d| d.group == UPGRADE_GROUP)
        .count();
    assert_eq!(runs, 1, "one upgrade deployment");
    let commits = setup
        .agent
        .logs()
        .lines()
        .iter()
        .filter(|l| l.contains("agent upgrade committed"))
        .count();
    assert_eq!(commits, 1, "committed once");
}

#[tokio::test]
async fn a_corrupt_build_a_wrong_signature_and_a_missing_chunk_are_refused_with_nothing_changed() {
    let setup = Setup::start().await;
    let next = next_build();
    let old_sha = sha_of(&setup.exe);
    let client = setup.flue.client();

    // A wrong signature: another key signed it.
    let other_seed = setup.flue.path("other.seed");
    let out = flue_cli(
        &setup.flue,
        &[
            "release",
            "keygen",
            "--seed-file",
            &other_seed.display().to_string(),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let forged = setup.sign(&next, NEXT, &other_seed, "forged.json").await;
    let out = setup.upgrade(&next, &forged).await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "web1: FAILED: upgrade refused, nothing changed: signature: not made by release key"
        ),
        "{said}"
    );

    // A corrupt build: the chunks stored are not the bytes signed (one byte flipped).
    let bytes = std::fs::read(&next).expect("read build");
    let seed = std::fs::read_to_string(&setup.seed).expect("seed");
    let signed = AgentBuild::sign(NEXT, &bytes, seed.trim()).expect("sign");
    let mut corrupt = bytes.clone();
    corrupt[1000] ^= 0xff;
    for (n, chunk) in corrupt.chunks(CHUNK_SIZE as usize).enumerate() {
        client
            .put_build_chunk(&signed.sha256, n as u64, chunk.to_vec())
            .await
            .expect("upload chunk");
    }
    let flue = &setup.flue;
    let refused = |id: &'static str, build: &AgentBuild| {
        let spec: ConfigSpec = serde_json::from_value(serde_json::json!({
            "id": id,
            "group": UPGRADE_GROUP,
            "config": build,
        }))
        .expect("spec");
        let client = client.clone();
        async move {
            client.create_config(&spec).await.expect("config");
            let d = client
                .create_deployment(&CreateDeployment::new(
                    id.parse().expect("id"),
                    "web1".parse().expect("id"),
                ))
                .await
                .expect("deployment");
            flue.finished(&d.id).await
        }
    };
    let d = refused("corrupt", &signed).await;
    assert_eq!(d.status, DeploymentStatus::Failed);
    let reason = d.status_reason.unwrap_or_default();
    assert!(
        reason.starts_with("upgrade refused, nothing changed: sha256: the bytes read hash to"),
        "{reason}"
    );

    // A wrong size: a chunk shorter than the signed size needs.
    let short = AgentBuild::sign(NEXT, &bytes[..bytes.len() - 1], seed.trim()).expect("sign");
    for (n, chunk) in bytes.chunks(CHUNK_SIZE as usize).enumerate() {
        let mut chunk = chunk.to_vec();
        if n == 0 {
            chunk.truncate(chunk.len() - 1);
        }
        client
            .put_build_chunk(&short.sha256, n as u64, chunk)
            .await
            .expect("upload chunk");
    }
    let d = refused("short", &short).await;
    let reason = d.status_reason.unwrap_or_default();
    assert!(
        reason.starts_with("upgrade refused, nothing changed: size: chunk 0 of"),
        "{reason}"
    );

    // A missing chunk: signed, never uploaded.
    let absent = AgentBuild::sign(NEXT, b"never uploaded", seed.trim()).expect("sign");
    let d = refused("absent", &absent).await;
    let reason = d.status_reason.unwrap_or_default();
    assert!(reason.contains("chunk 0 of 1 is missing"), "{reason}");

    assert_eq!(
        sha_of(&setup.exe),
        old_sha,
        "the agent's binary is unchanged"
    );
    setup.nothing_staged();
    setup.shows_version(OLD).await;
    setup.still_deploys("after-refusals").await;
}

#[tokio::test]
async fn a_new_build_that_crashes_at_start_is_rolled_back_and_the_upgrade_answered_failed() {
    let mut setup = Setup::start().await;
    let old_sha = sha_of(&setup.exe);
    // Signed by the release key, passes the check (`version`), then exits at start.
    let crash = setup.flue.path("flue-agent-crash");
    write_executable(
        &crash,
        "#!/bin/sh\nif [ \"$1\" = version ]; then echo 0.1.0+crash; exit 0; fi\necho 'crashing at start' >&2\nexit 3\n",
    );
    let manifest = setup
        .sign(&crash, "0.1.0+crash", &setup.seed, "crash.json")
        .await;
    let upgrade = upgrade(&setup.flue, &crash, &manifest);
    let agent = &mut setup.agent;
    let supervise = async {
        // The new build ran in the agent's process and crashed: its supervisor (systemd's
        // Restart=always) starts the agent again, which is still the old build.
        let status = agent.wait_exit().await;
        assert_eq!(status.code(), Some(3), "the crashing build ran");
        agent.restart().await;
    };
    let (out, ()) = tokio::join!(upgrade, supervise);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "web1: FAILED: the new build 0.1.0+crash did not come back healthy (it exited before finding its request queue); rolled back to {OLD}"
        )),
        "{said}"
    );
    assert_eq!(sha_of(&setup.exe), old_sha, "the old build is in place");
    setup.nothing_staged();
    setup.shows_version(OLD).await;
    setup.still_deploys("after-rollback").await;
}

#[tokio::test]
async fn the_previous_release_s_agent_runs_deployments_on_this_gateway() {
    let flue = Flue::start().await;
    let previous = extra_build("flue-agent-previous");
    let version = std::process::Command::new(&previous)
        .arg("version")
        .output()
        .expect("run the previous agent");
    assert!(
        !version.status.success(),
        "the previous release has no `version` command: is it really the previous release?"
    );
    let agent = flue
        .spawn_agent_program(previous, "old1", "agent-old1", &[], &[])
        .await;
    agent.ready().await;
    flue.script_config("skew", "echo \"hello $name\"", &["name"], &[])
        .await;
    let d = flue.deploy("skew", "old1", &[("name", "skew")]).await;
    let d = flue.finished(&d.id).await;
    assert_eq!(d.status, DeploymentStatus::Complete, "{d:?}");
    assert!(d.deploy_stdout.contains("hello skew"), "{d:?}");
    // Online, with no version (its heartbeats carry none).
    let client = flue.client();
    let id = ServerId::new("old1").expect("id");
    let server = client.get_server(&id).await.expect("read server");
    let presence = server.presence.expect("presence");
    assert_eq!(presence.status, flue_proto::PresenceStatus::Online);
    assert_eq!(presence.agent_version, None);
    // An upgrade reaches it as a deployment of a group it has no hook for: it fails,
    // saying so, and the agent goes on.
    let (_, seed) = flue_proto::upgrade::new_release_key();
    let build = AgentBuild::sign(NEXT, b"x", &seed).expect("sign");
    let spec: ConfigSpec = serde_json::from_value(serde_json::json!({
        "id": "upgrade-old",
        "group": UPGRADE_GROUP,
        "config": build,
    }))
    .expect("spec");
    client.create_config(&spec).await.expect("config");
    let d = flue.deploy("upgrade-old", "old1", &[]).await;
    let d = flue.finished(&d.id).await;
    assert_eq!(d.status, DeploymentStatus::Failed);
    let reason = d.status_reason.unwrap_or_default();
    assert!(
        reason.starts_with("no hook for group \"flue-agent-upgrade\""),
        "{reason}"
    );
    let d = flue.deploy("skew", "old1", &[("name", "again")]).await;
    assert_eq!(
        flue.finished(&d.id).await.status,
        DeploymentStatus::Complete
    );
}

#[tokio::test]
async fn a_rolling_upgrade_halts_at_max_failures_naming_the_servers_and_why_then_resumes() {
    let flue = Flue::start().await;
    let next = next_build();
    let seed = flue.path("release.seed");
    let public = keygen(&flue, &seed).await;
    // a2's agent was given no release key: its upgrade is refused.
    let mut agents = Vec::new();
    let mut exes = Vec::new();
    for server in ["a1", "a2", "a3"] {
        let exe = copy_agent(&flue, &format!("bin-{server}"));
        let key: &[&str] = match server {
            "a2" => &[],
            _ => &["--release-key", &public],
        };
        let agent = flue
            .spawn_agent_program(exe.clone(), server, &format!("agent-{server}"), &[], key)
            .await;
        agent.ready().await;
        agents.push(agent);
        exes.push(exe);
    }
    let manifest = flue.path("next.json");
    let out = flue_cli(
        &flue,
        &[
            "release",
            "sign",
            "--seed-file",
            &seed.display().to_string(),
            "--agent-version",
            NEXT,
            &next.display().to_string(),
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&manifest, &out.stdout).expect("manifest");
    let rollout = |max_failures: &'static str| {
        let (next, manifest) = (next.display().to_string(), manifest.display().to_string());
        let flue = &flue;
        async move {
            flue_cli(
                flue,
                &[
                    "server",
                    "upgrade",
                    "a1",
                    "a2",
                    "a3",
                    "--build",
                    &next,
                    "--manifest",
                    &manifest,
                    "--batch-size",
                    "1",
                    "--max-failures",
                    max_failures,
                ],
            )
            .await
        }
    };
    let old_sha = sha_of(&exes[2]);

    let out = rollout("1").await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("a1: upgraded: upgraded from {OLD} to {NEXT}")),
        "{said}"
    );
    let refused = "upgrade refused, nothing changed: this agent has no release key (start it with --release-key)";
    assert!(said.contains(&format!("a2: FAILED: {refused}")), "{said}");
    assert!(
        said.contains("1 failed, 1 upgraded; halted at --max-failures 1, not started: a3"),
        "{said}"
    );
    assert!(said.contains(&format!("  a2: {refused}")), "{said}");
    assert!(!said.contains("a3: "), "a3 was not started: {said}");
    assert_eq!(sha_of(&exes[0]), sha_of(&next));
    assert_eq!(sha_of(&exes[2]), old_sha, "a3 untouched");

    // Resumed with room for one more failure: a1's and a2's upgrades are adopted as they
    // ended, a3's runs.
    let out = rollout("2").await;
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("a3: upgraded: upgraded from"), "{said}");
    assert!(said.contains("1 failed, 2 upgraded"), "{said}");
    assert_eq!(sha_of(&exes[2]), sha_of(&next));
    let commits: usize = agents
        .iter()
        .map(|a| {
            a.logs()
                .lines()
                .iter()
                .filter(|l| l.contains("agent upgrade committed"))
                .count()
        })
        .sum();
    assert_eq!(commits, 2, "a1 and a3 upgraded once each");
}
