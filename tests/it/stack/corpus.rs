//! The public Heat template corpus (openstack/heat-templates, pinned, read from
//! `../shared/heat-templates` beside the repository): every HOT template that lives under
//! `hot/software-config/` or uses `OS::Heat::Software*` / `OS::Heat::Structured*` is
//! validated by the real `flue` binary as a Heat user would run it (`--server`, `-P`,
//! `-e` its own `_env` file, `--attr`), and each outcome is checked against
//! `corpus.table`. `flue stack validate` never contacts a gateway, so no broker runs.
//! The corpus is read beside heat-agents (the pinned sdist `scripts/test.sh` unpacks),
//! as in a checkout of both: the boot-config templates `get_file` its scripts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::run_flue;

/// The expected outcomes, one row per template (see the file's header).
const TABLE: &str = include_str!("corpus.table");

/// Templates of the corpus that Flue does not aim at: they need AWS wait conditions and
/// autoscaling groups of servers.
const OUT_OF_SCOPE: &str = "openshift-origin/";

/// Of the in-scope templates, at least this many must validate.
const MIN_VALID_IN_SCOPE: usize = 31;

/// One row of the table.
pub(super) struct Row {
    /// The template, relative to the corpus.
    pub(super) path: String,
    args: Vec<String>,
    expected: Expected,
}

impl Row {
    /// The arguments after `-t PATH`, with `corpus:REL` made a path inside `corpus`.
    pub(super) fn args(&self, corpus: &Path) -> Vec<String> {
        self.args
            .iter()
            .map(|a| match a.strip_prefix("corpus:") {
                Some(rel) => corpus.join(rel).display().to_string(),
                None => a.clone(),
            })
            .collect()
    }
}

#[derive(Debug, PartialEq)]
enum Expected {
    Valid,
    /// Refused with a message holding this text.
    Refused(String),
}

pub(super) fn rows() -> Vec<Row> {
    TABLE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            let [path, args, expected] = cells[..] else {
                panic!("corpus.table: {line:?} is not `path | args | expected`");
            };
            let expected = match expected.strip_prefix("refused: ") {
                Some(text) => Expected::Refused(text.to_owned()),
                None if expected == "valid" => Expected::Valid,
                None => panic!("corpus.table: {expected:?} is neither valid nor refused: …"),
            };
            let args = if args == "-" {
                Vec::new()
            } else {
                args.split_whitespace().map(str::to_owned).collect()
            };
            Row {
                path: path.to_owned(),
                args,
                expected,
            }
        })
        .collect()
}

/// The corpus's templates the table must list: HOT files (a `heat_template_version`
/// line, a byte-order mark allowed) under `hot/software-config/` or using a software
/// config or deployment resource.
fn selection(corpus: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    for top in ["hot", "openshift-origin"] {
        walk(&corpus.join(top), &mut files);
    }
    files
        .into_iter()
        .filter_map(|file| {
            let rel = file.strip_prefix(corpus).ok()?.to_str()?.to_owned();
            let text = std::fs::read_to_string(&file).ok()?;
            let hot = text
                .trim_start_matches('\u{feff}')
                .lines()
                .any(|l| l.starts_with("heat_template_version"));
            let software = rel.starts_with("hot/software-config/")
                || text.contains("OS::Heat::Software")
                || text.contains("OS::Heat::Structured");
            (hot && software).then_some(rel)
        })
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// The pinned corpus beside the repository, or `None` after saying on stderr why the
/// caller skips.
pub(super) fn locate() -> Option<PathBuf> {
    let corpus = flue_tests::repo_root().join("../shared/heat-templates");
    if corpus.join("hot").is_dir() {
        return Some(corpus);
    }
    eprintln!(
        "skipping: the Heat template corpus is not at {} (a pinned copy of \
         openstack/heat-templates' hot/ and openshift-origin/)",
        corpus.display()
    );
    None
}

#[tokio::test]
async fn the_heat_template_corpus_validates_as_its_table_expects() {
    let Some(corpus) = locate() else {
        return;
    };
    // heat-templates and heat-agents side by side, as the boot-config templates' paths
    // (`../../../../../heat-agents/…`) expect; `get_file` takes `..` lexically.
    let layout = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(&corpus, layout.path().join("heat-templates")).expect("link");
    std::os::unix::fs::symlink(
        crate::heat::heat_agents(),
        layout.path().join("heat-agents"),
    )
    .expect("link heat-agents");
    let corpus = layout.path().join("heat-templates");
    let rows = rows();
    let listed: BTreeSet<String> = rows.iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        listed.len(),
        rows.len(),
        "corpus.table lists a template twice"
    );
    assert_eq!(
        listed,
        selection(&corpus),
        "corpus.table must list exactly the corpus's software-config templates"
    );

    // Nothing listens on this port: validate never asks the gateway.
    let nowhere = "http://127.0.0.1:9".to_owned();
    let mut wrong = Vec::new();
    let mut valid_in_scope = 0;
    for row in &rows {
        let mut args: Vec<String> = ["stack", "validate", "-t"].map(str::to_owned).to_vec();
        args.push(corpus.join(&row.path).display().to_string());
        // Environment files and other paths in the table are relative to the corpus.
        args.extend(row.args(&corpus));
        let run = run_flue(nowhere.clone(), None, args).await;
        let outcome = match run.code {
            0 => Expected::Valid,
            _ => Expected::Refused(run.stderr.trim().to_owned()),
        };
        let ok = match (&row.expected, &outcome) {
            (Expected::Valid, Expected::Valid) => true,
            (Expected::Refused(want), Expected::Refused(got)) => {
                run.code == 1 && got.contains(want.as_str())
            }
            _ => false,
        };
        if !ok {
            wrong.push(format!(
                "{}: expected {:?}, got {:?} ({run})",
                row.path, row.expected, outcome
            ));
        }
        if outcome == Expected::Valid && !row.path.starts_with(OUT_OF_SCOPE) {
            valid_in_scope += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    assert!(
        valid_in_scope >= MIN_VALID_IN_SCOPE,
        "only {valid_in_scope} in-scope templates validate"
    );
}
