//! Tests of hook lookup, external hooks, the built-in script hook and result judging.

use std::future::pending;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use flue_proto::DeploymentStatus;
use serde_json::json;

use super::*;
use crate::item::tests::request;

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn item(config: Value, values: Value) -> HeatItem {
    crate::item::from_request(&request(config, values))
}

async fn judge(hook: &Hook, item: &HeatItem, work: &Path) -> DeploymentResult {
    let outcome = run(
        hook,
        item,
        &HookEnv::default(),
        work,
        pending(),
        None,
        Launch::default(),
    )
    .await;
    let decls: Vec<OutputDecl> = item
        .outputs
        .iter()
        .map(|o| {
            serde_json::from_value(json!({"name": o.name, "error_output": o.error_output}))
                .expect("decl")
        })
        .collect();
    outcome.into_result(&decls, None, OffsetDateTime::UNIX_EPOCH)
}

#[test]
fn lookup_takes_the_first_executable_then_the_builtin_script() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).expect("mkdir");
    std::fs::create_dir_all(&b).expect("mkdir");
    let dirs = vec![a.clone(), b.clone()];

    // Not executable in the first dir: skipped in favour of the second.
    std::fs::write(a.join("puppet"), "x").expect("write");
    write_exec(&b.join("puppet"), "#!/bin/sh\n");
    assert_eq!(find(&dirs, "puppet"), Ok(Hook::External(b.join("puppet"))));
    write_exec(&a.join("puppet"), "#!/bin/sh\n");
    assert_eq!(find(&dirs, "puppet"), Ok(Hook::External(a.join("puppet"))));

    assert_eq!(find(&dirs, "script"), Ok(Hook::Script));
    write_exec(&b.join("script"), "#!/bin/sh\n");
    assert_eq!(find(&dirs, "script"), Ok(Hook::External(b.join("script"))));

    let err = find(&dirs, "ansible").expect_err("no hook");
    assert_eq!(
        err,
        format!(
            "no hook for group \"ansible\" in {}:{}",
            a.display(),
            b.display()
        )
    );
    // The group as the dispatcher makes it a file name: never a path out of the dir.
    assert_eq!(
        find(&dirs, "../puppet"),
        Ok(Hook::External(a.join("puppet")))
    );
    assert_eq!(find(&dirs, ".."), Err("invalid group \"..\"".to_owned()));
    write_exec(&b.join("HeatUngrouped"), "#!/bin/sh\n");
    assert_eq!(
        find(&dirs, "Heat::Ungrouped"),
        Ok(Hook::External(b.join("HeatUngrouped")))
    );
}

#[tokio::test]
async fn script_hook_gets_inputs_as_env_and_returns_outputs_and_status() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = "echo \"foo=$foo n=$n list=$list server=$deploy_server_id\"\n\
                  echo oops >&2\n\
                  printf 'line1\\n' > \"$heat_outputs_path.result\"\n\
                  pwd > \"$heat_outputs_path.cwd\"\n\
                  exit 4\n";
    let it = item(
        json!({"group": "script", "config": script,
               "inputs": [{"name": "foo"}, {"name": "n"}, {"name": "list"}],
               "outputs": [{"name": "result"}, {"name": "cwd"}, {"name": "missing"}]}),
        json!({"foo": "bar baz", "n": 2, "list": [1, 2]}),
    );
    let r = judge(&Hook::Script, &it, tmp.path()).await;
    assert_eq!(r.deploy_stdout, "foo=bar baz n=2 list=[1, 2] server=web1\n");
    assert_eq!(r.deploy_stderr, "oops\n");
    assert_eq!(r.deploy_status_code, Some(4));
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert_eq!(
        r.status_reason.as_deref(),
        Some("hook exited with status 4")
    );
    assert_eq!(
        r.outputs.get("result"),
        Some(&json!("line1\n")),
        "kept as-is"
    );
    let work = tmp.path().join("d1");
    assert_eq!(
        r.outputs.get("cwd"),
        Some(&json!(format!("{}\n", work.display())))
    );
    assert!(!r.outputs.contains_key("missing"));
    assert!(!work.exists(), "the work dir is removed");
}

#[tokio::test]
async fn script_with_a_shebang_runs_directly_and_error_outputs_fail_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = "#!/bin/sh\necho boom > \"$heat_outputs_path.err\"\necho $0\n";
    let it = item(
        json!({"group": "script", "config": script,
               "outputs": [{"name": "err", "error_output": true}]}),
        json!({}),
    );
    let r = judge(&Hook::Script, &it, tmp.path()).await;
    assert_eq!(r.deploy_status_code, Some(0));
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert_eq!(
        r.status_reason.as_deref(),
        Some("error output \"err\": boom")
    );
    assert!(r.deploy_stdout.ends_with("/d1/d1\n"), "{}", r.deploy_stdout);

    let ok = item(
        json!({"group": "script", "config": "true",
                         "outputs": [{"name": "err", "error_output": true}]}),
        json!({}),
    );
    let r = judge(&Hook::Script, &ok, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Complete, "{r:?}");
    assert_eq!(r.status_reason, None);

    // Written but empty: present, so failed, as Heat fails it.
    let empty = item(
        json!({"group": "script", "config": ": > \"$heat_outputs_path.err\"",
               "outputs": [{"name": "err", "error_output": true}]}),
        json!({}),
    );
    let r = judge(&Hook::Script, &empty, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Failed, "{r:?}");
    assert_eq!(
        r.status_reason.as_deref(),
        Some("error output \"err\" present (empty)")
    );
}

#[tokio::test]
async fn external_hook_reads_the_item_and_answers_in_json() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let seen = tmp.path().join("seen.json");
    let hook = tmp.path().join("echoer");
    write_exec(
        &hook,
        &format!(
            "#!/bin/sh\ncat > {}\necho noise >&2\n\
             echo '{{\"deploy_stdout\":\"out\",\"deploy_stderr\":\"err\",\"deploy_status_code\":0,\
             \"result\":\"r\",\"undeclared\":1}}'\n",
            seen.display()
        ),
    );
    let it = item(
        json!({"group": "echoer", "config": {"k": "v"}, "outputs": [{"name": "result"}]}),
        json!({"x": 1}),
    );
    let r = judge(&Hook::External(hook), &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Complete, "{r:?}");
    assert_eq!(
        (r.deploy_stdout.as_str(), r.deploy_stderr.as_str()),
        ("out", "err")
    );
    assert_eq!(r.outputs, [("result".to_owned(), json!("r"))].into());
    let seen: Value = serde_json::from_slice(&std::fs::read(&seen).expect("read")).expect("json");
    assert_eq!(seen, serde_json::to_value(&it).expect("ser"));
}

#[tokio::test]
async fn external_hook_failures_keep_its_stderr() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hook = tmp.path().join("bad");
    write_exec(&hook, "#!/bin/sh\necho broken >&2\nexit 2\n");
    let it = item(json!({"group": "bad"}), json!({}));
    let r = judge(&Hook::External(hook.clone()), &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert_eq!(
        r.status_reason,
        Some(format!("hook {} exited with status 2", hook.display()))
    );
    assert_eq!(r.deploy_stderr, "broken\n");

    write_exec(&hook, "#!/bin/sh\necho not json\necho why >&2\nexit 3\n");
    let r = judge(&Hook::External(hook.clone()), &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert_eq!(
        r.status_reason,
        Some(format!("hook {} exited with status 3", hook.display()))
    );
    assert_eq!(
        (r.deploy_stdout.as_str(), r.deploy_stderr.as_str()),
        ("not json\n", "why\n")
    );

    write_exec(&hook, "#!/bin/sh\necho '[1]'\n");
    let r = judge(&Hook::External(hook), &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert!(
        r.status_reason
            .as_deref()
            .unwrap_or("")
            .contains("printed JSON that is not an object"),
        "{r:?}"
    );
}

#[tokio::test]
async fn external_hooks_are_judged_as_the_heat_dispatcher_judges_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hook = tmp.path().join("h");
    let it = item(
        json!({"group": "h", "outputs": [{"name": "result"}, {"name": "err", "error_output": true}]}),
        json!({}),
    );
    let run = async |body: &str| {
        write_exec(&hook, &format!("#!/bin/sh\n{body}\n"));
        judge(&Hook::External(hook.clone()), &it, tmp.path()).await
    };

    // Silent, exit 0: COMPLETE (55-heat-config signals `{}`).
    let r = run("echo only-stderr >&2").await;
    assert_eq!(r.status, DeploymentStatus::Complete, "{r:?}");
    assert_eq!(
        (r.deploy_stdout.as_str(), r.deploy_stderr.as_str()),
        ("", "only-stderr\n")
    );
    // Text, exit 0: COMPLETE with the text as deploy_stdout.
    let r = run("echo plain words").await;
    assert_eq!(r.status, DeploymentStatus::Complete, "{r:?}");
    assert_eq!(r.deploy_stdout, "plain words\n");
    // Exit 1 but a JSON answer: the answer is used, its status code too.
    let r = run(r#"echo '{"deploy_stdout": "o", "deploy_status_code": 0, "result": "r"}'; exit 1"#)
        .await;
    assert_eq!(r.status, DeploymentStatus::Complete, "{r:?}");
    assert_eq!(r.outputs.get("result"), Some(&json!("r")));
    assert_eq!(r.deploy_status_code, Some(0));
    let r = run(r#"echo '{"deploy_status_code": 5, "result": "r"}'; exit 1"#).await;
    assert_eq!(
        r.status_reason.as_deref(),
        Some("hook exited with status 5")
    );
    assert_eq!(r.outputs.get("result"), Some(&json!("r")));
    // ... and one that says no status: the exit status (Heat would lose it).
    let r = run(r#"echo '{"result": "r"}'; exit 2"#).await;
    assert_eq!(r.status, DeploymentStatus::Failed, "{r:?}");
    assert_eq!(r.deploy_status_code, Some(2));
    assert_eq!(r.outputs.get("result"), Some(&json!("r")));
    // An error output that is there at all fails it: empty, null.
    for answer in [r#"{"err": ""}"#, r#"{"err": null}"#] {
        let r = run(&format!("echo '{answer}'")).await;
        assert_eq!(r.status, DeploymentStatus::Failed, "{answer}");
        assert_eq!(
            r.status_reason.as_deref(),
            Some("error output \"err\" present (empty)")
        );
    }
    let r = run(r#"printf '%s' '{"err": "disk full\n"}'"#).await;
    assert_eq!(
        r.status_reason.as_deref(),
        Some("error output \"err\": disk full")
    );
}

#[test]
fn status_codes_are_read_as_heat_reads_them() {
    for ok in [
        json!(null),
        json!(0),
        json!("0"),
        json!(""),
        json!(false),
        json!(0.0),
        json!([]),
    ] {
        assert!(
            status_code(Some(ok.clone())).is_ok_and(|c| c.unwrap_or(0) == 0),
            "{ok}"
        );
    }
    assert_eq!(status_code(None), Ok(None));
    assert_eq!(status_code(Some(json!("3"))), Ok(Some(3)));
    assert_eq!(status_code(Some(json!(2.0))), Ok(Some(2)));
    assert_eq!(
        status_code(Some(json!("oops"))),
        Err("hook reported status \"oops\"".to_owned())
    );
    assert_eq!(
        status_code(Some(json!(true))),
        Err("hook reported status true".to_owned())
    );
    assert!(status_code(Some(json!(1.5))).is_err());
    assert!(status_code(Some(json!({"a": 1}))).is_err());
}

#[test]
fn bound_keeps_the_first_mebibyte_and_marks_the_cut() {
    assert_eq!(bound("short".into(), false), "short");
    assert_eq!(
        bound("short".into(), true),
        format!("short{TRUNCATED_MARKER}")
    );
    let long = format!("{}é", "a".repeat(MAX_STREAM_BYTES - 1));
    let b = bound(long, false);
    // 'é' is two bytes and would straddle the limit: the cut falls before it.
    assert_eq!(
        b,
        format!("{}{TRUNCATED_MARKER}", "a".repeat(MAX_STREAM_BYTES - 1))
    );
}

#[tokio::test]
async fn script_output_is_truncated_at_one_mebibyte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = "head -c 3000000 /dev/zero | tr '\\0' x\necho small >&2\n";
    let it = item(json!({"group": "script", "config": script}), json!({}));
    let r = judge(&Hook::Script, &it, tmp.path()).await;
    assert_eq!(
        r.deploy_stdout.len(),
        MAX_STREAM_BYTES + TRUNCATED_MARKER.len()
    );
    assert!(r.deploy_stdout.ends_with(TRUNCATED_MARKER));
    assert_eq!(r.deploy_stderr, "small\n");
    assert_eq!(r.status, DeploymentStatus::Complete);
}

#[tokio::test]
async fn a_stopped_script_reports_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let it = item(
        json!({"group": "script", "config": "echo before; exec sleep 60"}),
        json!({}),
    );
    let outcome = run(
        &Hook::Script,
        &it,
        &HookEnv::default(),
        tmp.path(),
        async { StopReason::TimedOut },
        None,
        Launch::default(),
    )
    .await;
    assert_eq!(outcome.failure.as_deref(), Some("timed out"));
}

#[tokio::test]
async fn a_script_output_file_over_the_limit_fails_the_deployment() {
    use crate::script::MAX_OUTPUT_FILE_BYTES;
    let tmp = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "head -c {MAX_OUTPUT_FILE_BYTES} /dev/zero | tr '\\0' x > \"$heat_outputs_path.exact\"\n\
         head -c {} /dev/zero | tr '\\0' x > \"$heat_outputs_path.big\"\n\
         ln -s /dev/zero \"$heat_outputs_path.endless\"\n\
         echo done\n",
        MAX_OUTPUT_FILE_BYTES + 1
    );
    let outputs = json!([{"name": "exact"}, {"name": "big"}, {"name": "endless"}]);
    let it = item(
        json!({"group": "script", "config": script, "outputs": outputs}),
        json!({}),
    );
    let r = judge(&Hook::Script, &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Failed);
    assert_eq!(
        r.status_reason.as_deref(),
        Some("output \"big\" is larger than the limit of 1048576 bytes")
    );
    assert_eq!(r.deploy_stdout, "done\n");
    let exact = r.outputs.get("exact").and_then(Value::as_str);
    assert_eq!(
        exact.map(str::len),
        Some(MAX_OUTPUT_FILE_BYTES),
        "a file of exactly the limit is kept"
    );
    assert!(!r.outputs.contains_key("big"));
    assert!(
        !r.outputs.contains_key("endless"),
        "an endless file is not read to its end"
    );

    // The endless one alone fails it too.
    let it = item(
        json!({"group": "script", "config": "ln -s /dev/zero \"$heat_outputs_path.endless\"\n",
               "outputs": [{"name": "endless"}]}),
        json!({}),
    );
    let r = judge(&Hook::Script, &it, tmp.path()).await;
    assert_eq!(
        r.status_reason.as_deref(),
        Some("output \"endless\" is larger than the limit of 1048576 bytes")
    );
}

/// Runs `hook` with a progress sink; the lines it queued, as (stream, text).
async fn progress_of(hook: &Hook, item: &HeatItem, work: &Path) -> Vec<(OutputStream, String)> {
    let (sink, mut rx) = crate::progress::Sink::for_test(100);
    run(
        hook,
        item,
        &HookEnv::default(),
        work,
        pending(),
        Some(sink),
        Launch::default(),
    )
    .await;
    let mut lines = Vec::new();
    while let Some(l) = rx.recv().await {
        lines.push((l.stream, l.text));
    }
    lines
}

#[tokio::test]
async fn progress_gets_both_streams_of_a_script_but_only_stderr_of_an_external_hook() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let it = item(
        json!({"group": "script", "config": "echo out; echo err >&2"}),
        json!({}),
    );
    let lines = progress_of(&Hook::Script, &it, tmp.path()).await;
    assert!(lines.contains(&(OutputStream::Stdout, "out".to_owned())));
    assert!(lines.contains(&(OutputStream::Stderr, "err".to_owned())));

    let hook = tmp.path().join("ext");
    write_exec(
        &hook,
        "#!/bin/sh\ncat >/dev/null\necho working >&2\nprintf '%s' '{\"deploy_stdout\":\"x\",\"secret\":\"s3cret\"}'\n",
    );
    let lines = progress_of(&Hook::External(hook), &it, tmp.path()).await;
    assert_eq!(lines, [(OutputStream::Stderr, "working".to_owned())]);
}

#[test]
fn hidden_inputs_and_outputs_are_hidden_in_the_streams_even_where_one_was_cut() {
    let decls: Vec<OutputDecl> = serde_json::from_value(json!([
        {"name": "password", "hidden": true},
        {"name": "address"}
    ]))
    .expect("decls");
    let cut = bound(
        format!("{}pw=input-Secret", "x".repeat(MAX_STREAM_BYTES - 9)),
        false,
    );
    assert!(cut.ends_with(&format!("pw=input-{TRUNCATED_MARKER}")));
    let outcome = Outcome {
        stdout: "using input-Secret\ngenerated output-Secret at 10.0.0.1\n".to_owned(),
        stderr: cut,
        outputs: [
            ("password".to_owned(), json!("output-Secret")),
            ("address".to_owned(), json!("10.0.0.1")),
        ]
        .into(),
        ..Outcome::default()
    };
    let hidden = outcome.hiding(Redactor::new(["input-Secret".to_owned()]), &decls);
    assert_eq!(
        hidden.stdout,
        "using <hidden>\ngenerated <hidden> at 10.0.0.1\n"
    );
    assert!(
        hidden
            .stderr
            .ends_with(&format!("pw=<hidden>{TRUNCATED_MARKER}")),
        "{}",
        &hidden.stderr[hidden.stderr.len() - 40..]
    );
    assert_eq!(
        hidden.outputs["password"],
        json!("output-Secret"),
        "outputs stay"
    );
}

#[tokio::test]
async fn a_silent_hook_that_exits_0_completes_with_no_status_code_as_under_heat() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hook = tmp.path().join("quiet");
    write_exec(&hook, "#!/bin/sh\ncat > /dev/null\necho note >&2\n");
    let it = item(json!({"group": "quiet"}), json!({}));
    let r = judge(&Hook::External(hook), &it, tmp.path()).await;
    assert_eq!(r.status, DeploymentStatus::Complete);
    // 55-heat-config signals `{}`: Heat's deploy_status_code is None.
    assert_eq!(r.deploy_status_code, None);
    assert_eq!(r.deploy_stdout, "");
    assert_eq!(r.deploy_stderr, "note\n", "kept, where Heat drops it");
}
