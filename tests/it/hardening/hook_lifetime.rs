//! A dead agent's hook dies with it: SIGKILL the agent mid-hook and nothing of the hook
//! (its grandchildren included) runs on, the deployment is reported `interrupted`, and
//! the next deployment starts only after the old hook is gone. Also the second line: at
//! start, the agent kills a group the ledger says was running before it reports anything.
//! And the order that lets one ledger flush name the group before the hook runs: the
//! guard (the real binary) leads its group and waits; the hook starts only on the go.
//! Both guards behave so: the small `flue-hook-guard` the agent uses when it is installed
//! next to it (as in `target/<profile>/`), and `flue-agent hook-guard` otherwise.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use flue_agent::guard::{self, Guard};
use flue_agent::ledger::{Ledger, LedgerKey};
use flue_agent::process::{self, HookProcess, Launch, Spawned, StopReason, Tees};
use flue_proto::{DeploymentRequest, DeploymentStatus, ServerId, TenantId, subject};
use flue_tests::{Flue, WAIT, bin, file_lines, wait_until};

/// How long a killed group may take to disappear from `/proc`: far below the hook's 25 s.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// `(pgrp, zombie)` of a process, read from `/proc/<pid>/stat` (fields 5 and 3), counted
/// from the last `)` since the command name may hold spaces.
fn stat(pid: u32) -> Option<(u32, bool)> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = line[line.rfind(')')? + 1..].split_whitespace().collect();
    Some((fields.get(2)?.parse().ok()?, fields.first()? == &"Z"))
}

/// The live processes of process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(pgrp, zombie)| pgrp == pgid && !zombie))
        .collect()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos()
}

/// A script hook that starts a 25 s grandchild, then says (atomically) `<its pid>
/// <grandchild pid>` in `marker`, and waits for the grandchild.
fn long_hook(marker: &Path) -> String {
    format!(
        "#!/bin/sh\nsleep 25 &\necho \"$$ $!\" > '{0}.tmp'\nmv '{0}.tmp' '{0}'\nwait\n",
        marker.display()
    )
}

/// A script hook that appends the time it started, in nanoseconds, to `starts`.
fn stamping_hook(starts: &Path) -> String {
    format!("#!/bin/sh\ndate +%s%N >> '{}'\n", starts.display())
}

#[tokio::test]
async fn a_hook_and_its_grandchildren_die_with_a_killed_agent_and_the_next_deployment_starts_after_them()
 {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let marker = flue.path("long-started");
    let starts = flue.path("next-starts");
    flue.script_config("long", &long_hook(&marker), &[], &[])
        .await;
    flue.script_config("next", &stamping_hook(&starts), &[], &[])
        .await;
    let mut agent = flue.agent("s1", &[]).await;

    let d = flue.deploy("long", "s1", &[]).await;
    let pids = wait_until("the hook's marker", WAIT, || {
        std::fs::read_to_string(&marker).ok()
    })
    .await;
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    let (hook, grandchild) = (pids[0], pids[1]);
    let (pgid, _) = stat(hook).expect("the hook runs");
    assert_eq!(stat(grandchild).map(|s| s.0), Some(pgid), "one group");
    assert_ne!(
        Some(pgid),
        agent.pid(),
        "the hook is not in the agent's group"
    );
    let members = group_members(pgid);
    assert!(
        members.contains(&hook) && members.contains(&grandchild),
        "{members:?}"
    );

    agent.kill9().await;
    wait_until(
        "no process of the hook's group left after its agent was killed",
        GONE_WITHIN,
        || group_members(pgid).is_empty().then_some(()),
    )
    .await;
    let gone_at = now_nanos();

    agent.restart().await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed, "{done:?}");
    assert_eq!(done.status_reason.as_deref(), Some("interrupted"));

    let next = flue.deploy("next", "s1", &[]).await;
    assert_eq!(
        flue.finished(&next.id).await.status,
        DeploymentStatus::Complete
    );
    let started: Vec<u128> = file_lines(&starts)
        .iter()
        .map(|l| l.parse().expect("nanoseconds"))
        .collect();
    assert_eq!(started.len(), 1);
    assert!(
        started[0] > gone_at,
        "the next hook started only after the killed one was gone"
    );
}

#[tokio::test]
async fn at_start_the_agent_kills_a_hook_group_its_ledger_says_was_running_before_reporting_it_interrupted()
 {
    let flue = Flue::start().await;
    flue.register("s1").await;
    let starts = flue.path("starts");
    flue.script_config("c", &stamping_hook(&starts), &[], &[])
        .await;
    // Queued while no agent runs: the request sits in the server's queue.
    let d = flue.deploy("c", "s1", &[]).await;
    let js = jetstream::new(flue.nats.client().await);
    let tenant = TenantId::new("default").expect("tenant");
    let server = ServerId::new("s1").expect("server");
    let raw = js
        .get_stream(subject::REQUEST_STREAM)
        .await
        .expect("request stream")
        .get_last_raw_message_by_subject(&subject::request(&tenant, &server))
        .await
        .expect("the queued request");
    let req: DeploymentRequest = serde_json::from_slice(&raw.payload).expect("request");
    assert_eq!(req.deployment_id, d.id);

    // A survivor of some earlier agent: a process group (leader and a grandchild) this
    // test starts itself, recorded the way the agent records a running hook.
    let mut survivor = tokio::process::Command::new("/bin/sh")
        .args(["-c", "sleep 60 & wait"])
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the survivor");
    let pgid = survivor.id().expect("pid");
    wait_until("the survivor's grandchild", WAIT, || {
        (group_members(pgid).len() == 2).then_some(())
    })
    .await;
    let state_dir = flue.path("agent-s1");
    std::fs::create_dir_all(&state_dir).expect("state dir");
    {
        let ledger = Ledger::open(&state_dir.join("ledger")).expect("ledger");
        let key = LedgerKey::of_request(&req);
        let at = time::OffsetDateTime::now_utc();
        ledger
            .record_started(&key, at, None, None)
            .await
            .expect("started");
        let hook = HookProcess::of(pgid).expect("the survivor runs");
        ledger
            .record_hook(&key, at, hook, None, None)
            .await
            .expect("hook");
    }

    let _agent = flue.agent_in("s1", "agent-s1", &[], &[]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed, "{done:?}");
    assert_eq!(done.status_reason.as_deref(), Some("interrupted"));
    // Checked at once, not waited for: the group was gone before the report.
    assert_eq!(
        group_members(pgid),
        Vec::<u32>::new(),
        "survivor killed first"
    );
    let status = tokio::time::timeout(WAIT, survivor.wait())
        .await
        .expect("reaped")
        .expect("status");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        file_lines(&starts).is_empty(),
        "the interrupted hook never ran"
    );

    let next = flue.deploy("c", "s1", &[]).await;
    assert_eq!(
        flue.finished(&next.id).await.status,
        DeploymentStatus::Complete
    );
    assert_eq!(file_lines(&starts).len(), 1);
}

#[tokio::test]
async fn a_hook_killed_by_a_signal_is_reported_as_minus_that_signal_through_its_guard() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.script_config(
        "sig",
        "#!/bin/sh\necho before\nkill -USR1 $$\necho after\n",
        &[],
        &[],
    )
    .await;
    let _agent = flue.agent("s1", &[]).await;
    let d = flue.deploy("sig", "s1", &[]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Failed, "{done:?}");
    assert_eq!(done.deploy_status_code, Some(-i64::from(libc::SIGUSR1)));
    assert_eq!(done.deploy_stdout, "before\n");
}

/// The two guards an agent may use: its small binary, and its own `hook-guard`.
fn guards() -> [Guard; 2] {
    [
        Guard::binary(bin(guard::BINARY)),
        Guard::at(bin("flue-agent")),
    ]
}

/// Runs `script` (`/bin/sh -c`, its stdin `input`) under the real `guard` with a go gate;
/// `decide` gets the spawned group before the hook may start and says whether to send
/// the go. Returns what the run left and what `decide` saw.
async fn gated(
    guard: &Guard,
    script: &str,
    input: &[u8],
    decide: impl FnOnce(&Spawned) -> bool,
) -> (process::Finished, Option<HookProcess>) {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let launch = Launch {
        guard: Some(guard.clone()),
        started: Some(tx),
    };
    let run = process::run(
        cmd,
        Some(input.to_vec()),
        1 << 16,
        std::future::pending::<StopReason>(),
        Tees::default(),
        launch,
    );
    let gate = async {
        let spawned = rx.await.expect("the group is announced");
        let group = spawned.group.clone();
        if decide(&spawned) {
            spawned.go.send(()).expect("the run waits for the go");
        }
        group
    };
    let (finished, group) = tokio::time::timeout(WAIT, async { tokio::join!(run, gate) })
        .await
        .expect("bounded");
    (finished.expect("spawned"), group)
}

#[tokio::test]
async fn a_guarded_hook_starts_only_on_the_go_in_the_group_announced_before_it_with_its_whole_stdin()
 {
    for g in guards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        // The hook's own process group (field 5 of its stat) and the stdin it got.
        let script = format!(
            "cut -d' ' -f5 /proc/$$/stat > '{0}'; cat >> '{0}'",
            marker.display()
        );
        let (finished, group) = gated(&g, &script, b"{\"item\": 1}", |spawned| {
            let group = spawned.group.as_ref().expect("the guard's identity");
            assert!(group.is_running(), "the guard runs, waiting");
            assert_eq!(
                stat(group.pid).map(|s| s.0),
                Some(group.pid),
                "the guard leads its own group"
            );
            assert!(!marker.exists(), "no hook before the go");
            true
        })
        .await;
        assert_eq!(finished.status_code(), Some(0), "{g:?}: {finished:?}");
        let group = group.expect("announced");
        let ran = std::fs::read_to_string(&marker).expect("the hook ran after the go");
        assert_eq!(
            ran,
            format!("{}\n{{\"item\": 1}}", group.pid),
            "{g:?}: in the announced group, with its whole stdin and not the go byte"
        );
    }
}

#[tokio::test]
async fn a_guarded_hook_whose_group_was_not_recorded_never_runs() {
    for g in guards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        let script = format!("touch '{}'", marker.display());
        // The agent could not record the group (its ledger failed): no go is ever sent.
        let (finished, group) = gated(&g, &script, b"{}", |_| false).await;
        assert!(group.is_some());
        assert_eq!(
            finished.status_code(),
            Some(i64::from(guard::CANNOT_RUN)),
            "{g:?}: {finished:?}"
        );
        // The guard was reaped, and it waits for its hook: had the hook started, it was done.
        assert!(!marker.exists(), "{g:?}: the hook ran without a go");
    }
}

#[tokio::test]
async fn the_agent_runs_its_hooks_under_the_small_guard_installed_next_to_it() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    // The hook's parent's executable, the hook's process group, its parent's pid.
    let script = "#!/bin/sh\nreadlink /proc/$PPID/exe\ncut -d' ' -f5 /proc/$$/stat\necho $PPID\n";
    flue.script_config("who", script, &[], &[]).await;
    let _agent = flue.agent("s1", &[]).await;
    let d = flue.deploy("who", "s1", &[]).await;
    let done = flue.finished(&d.id).await;
    assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
    let lines: Vec<&str> = done.deploy_stdout.lines().collect();
    let small = std::fs::canonicalize(bin(guard::BINARY)).expect("the small guard is built");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        Path::new(lines[0]),
        small,
        "the hook's parent is the small guard"
    );
    assert_eq!(lines[1], lines[2], "which leads the hook's process group");
}
