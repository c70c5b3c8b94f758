//! A dead agent's hook dies with it: SIGKILL the agent mid-hook and nothing of the hook
//! (its grandchildren included) runs on, the deployment is reported `interrupted`, and
//! the next deployment starts only after the old hook is gone. Also the second line: at
//! start, the agent kills a group the ledger says was running before it reports anything.
//! And the order that lets one ledger flush name the group before the hook runs: the
//! guard (the real binary) leads its group and waits; the hook starts only on the go.
//! Both guards behave so: the small `flue-hook-guard` the agent uses when it is installed
//! next to it (as in `target/<profile>/`), and `flue-agent hook-guard` otherwise (or when
//! the small one is too old to be started ahead). The agent starts its next hook's guard
//! ahead, while it waits for a request; the hook's command reaches it with the go.

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
    let launch = |started| Launch {
        guard: Some(guard.clone()),
        ready: None,
        started: Some(started),
    };
    gated_run(cmd, input, launch, decide).await
}

/// [`gated`] for any command, started as `launch` (given the announcement's sender) says.
async fn gated_run(
    cmd: tokio::process::Command,
    input: &[u8],
    launch: impl FnOnce(tokio::sync::oneshot::Sender<Spawned>) -> Launch,
    decide: impl FnOnce(&Spawned) -> bool,
) -> (process::Finished, Option<HookProcess>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = process::run(
        cmd,
        Some(input.to_vec()),
        1 << 16,
        std::future::pending::<StopReason>(),
        Tees::default(),
        launch(tx),
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
async fn a_guard_started_ahead_waits_alone_in_its_group_then_runs_exactly_the_command_sent_with_the_go()
 {
    for g in guards() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ran");
        let ready = process::Ready::start(&g).await.expect("started ahead");
        let group = ready.group().cloned().expect("the guard's identity");
        assert!(group.is_running(), "{g:?}: the guard runs, waiting");
        assert_eq!(
            group_members(group.pid),
            vec![group.pid],
            "{g:?}: it leads its own group, alone: no hook before the go"
        );
        // Its group, working directory, argument, a variable set, one removed, its stdin.
        let script = format!(
            "{{ cut -d' ' -f5 /proc/$$/stat; pwd -P; echo \"$1|$FLUE_X|${{HOME-unset}}\"; cat; }} > '{}'",
            marker.display()
        );
        let mut cmd = tokio::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("sh")
            .arg("an argument")
            .env("FLUE_X", "a=b c")
            .env_remove("HOME")
            .current_dir(dir.path());
        let launch = |started| Launch {
            guard: None,
            ready: Some(ready),
            started: Some(started),
        };
        let (finished, announced) = gated_run(cmd, b"{\"item\": 1}", launch, |spawned| {
            assert!(!marker.exists(), "no hook before the go");
            spawned.group.is_some()
        })
        .await;
        assert_eq!(finished.status_code(), Some(0), "{g:?}: {finished:?}");
        assert_eq!(
            announced.as_ref(),
            Some(&group),
            "{g:?}: the group announced is the guard's"
        );
        let ran = std::fs::read_to_string(&marker).expect("the hook ran after the go");
        let cwd = std::fs::canonicalize(dir.path()).expect("canonical");
        assert_eq!(
            ran,
            format!(
                "{}\n{}\nan argument|a=b c|unset\n{{\"item\": 1}}",
                group.pid,
                cwd.display()
            ),
            "{g:?}: the command sent, in the guard's group, with its whole stdin"
        );
    }
}

/// The pids of `parent`'s live children whose executable is `exe`.
fn children_running(parent: u32, exe: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let ppid = status
                .lines()
                .find_map(|l| l.strip_prefix("PPid:"))
                .and_then(|p| p.trim().parse::<u32>().ok());
            ppid == Some(parent)
                && stat(pid).is_some_and(|(_, zombie)| !zombie)
                && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe)
        })
        .collect()
}

#[tokio::test]
async fn an_idle_agent_keeps_a_guard_started_ahead_and_its_next_hook_runs_under_that_one() {
    let flue = Flue::start().await;
    flue.register("s1").await;
    flue.script_config("parent", "#!/bin/sh\necho $PPID\n", &[], &[])
        .await;
    let agent = flue.agent("s1", &[]).await;
    let pid = agent.pid().expect("running");
    let small = std::fs::canonicalize(bin(guard::BINARY)).expect("the small guard is built");
    for round in 0..2 {
        // Started before any request: the agent waits for one with its guard ready.
        let ready = wait_until("a guard started ahead", WAIT, || {
            match children_running(pid, &small)[..] {
                [one] => Some(one),
                _ => None,
            }
        })
        .await;
        let d = flue.deploy("parent", "s1", &[]).await;
        let done = flue.finished(&d.id).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        assert_eq!(
            done.deploy_stdout.trim(),
            ready.to_string(),
            "round {round}: the hook ran under the guard that was ready before its request"
        );
    }
}

#[tokio::test]
async fn an_agent_beside_a_small_guard_too_old_to_start_ahead_runs_its_hooks_under_its_own_binary()
{
    let flue = Flue::start().await;
    flue.register("s1").await;
    // An install whose flue-hook-guard predates `--ahead`: it takes only the command line
    // form and refuses the rest, as that release did.
    let dir = flue.path("old-guard");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let exe = dir.join("flue-agent");
    std::fs::copy(bin("flue-agent"), &exe).expect("copy the agent");
    let old = dir.join(guard::BINARY);
    std::fs::write(
        &old,
        "#!/bin/sh\n[ \"$3\" = -- ] && { shift 3; exec \"$@\"; }\necho 'flue hook guard: expected -- before the hook' >&2\nexit 127\n",
    )
    .expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let script = "#!/bin/sh\nreadlink /proc/$PPID/exe\ncut -d' ' -f5 /proc/$$/stat\necho $PPID\n";
    flue.script_config("who", script, &[], &[]).await;
    let agent = flue
        .spawn_agent_program(exe.clone(), "s1", "agent-s1", &[], &[])
        .await;
    agent.ready().await;
    for _ in 0..2 {
        let d = flue.deploy("who", "s1", &[]).await;
        let done = flue.finished(&d.id).await;
        assert_eq!(done.status, DeploymentStatus::Complete, "{done:?}");
        let lines: Vec<&str> = done.deploy_stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(
            Path::new(lines[0]),
            std::fs::canonicalize(&exe).expect("canonical"),
            "the hook's parent is the agent's own binary as the guard"
        );
        assert_eq!(lines[1], lines[2], "which leads the hook's process group");
    }
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
