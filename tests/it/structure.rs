//! The code's shape, read from the sources (nothing runs): the gateway's top-level modules
//! form no cycle, only `proto` spells the broker's names (subjects, streams, buckets), and
//! the gateway's and the agent's libraries show only their documented surface.
//!
//! Both read the Rust sources with comments and doc comments removed, and leave out
//! `#[cfg(test)]` items (test modules, inline or in their own file): a test may reach
//! anywhere and spell what it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use flue_tests::repo_root;

#[test]
fn the_gateways_top_level_modules_form_no_cycle() {
    let src = repo_root().join("broker-gateway/src");
    let graph = ModuleGraph::read(&src);
    assert!(
        graph.modules.len() > 20,
        "too few modules found in {}: {:?}",
        src.display(),
        graph.modules
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "the gateway's top-level modules form a cycle (the arrow goes from `api` to the domain, from the domain to `store`, never back):\n{}",
        graph.describe(&cycles)
    );
}

#[test]
fn a_cycle_of_two_modules_through_a_use_group_is_found() {
    // The detector itself: `a` reaches `b` through a `use crate::{…}` group, `b` reaches
    // `a` through a path in code; a comment and a test module naming `c` add no edge.
    let dir = tempfile::tempdir().expect("temp dir");
    let write =
        |name: &str, text: &str| std::fs::write(dir.path().join(name), text).expect("write");
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write(
        "a.rs",
        "use crate::{b::Thing, c};\n// crate::c is named here only\n",
    );
    write(
        "b.rs",
        "pub fn f() { crate::a::g(); }\n#[cfg(test)]\nmod tests { use crate::c; }\n",
    );
    write("c.rs", "//! [`crate::a`] in a doc comment\npub fn h() {}\n");
    let graph = ModuleGraph::read(dir.path());
    assert_eq!(
        graph.cycles(),
        vec![BTreeSet::from(["a".to_owned(), "b".to_owned()])]
    );
    assert!(!graph.edges["b"].contains_key("c"), "{:?}", graph.edges);
    assert!(graph.edges["c"].is_empty(), "{:?}", graph.edges);
}

/// The gateway's `pub mod`s, each with its own `pub mod`s: the library's surface as
/// `broker-gateway/src/lib.rs`'s doc gives it and why (issue 23 point 4). Every other
/// module is the crate's own; widening the surface is a decision, written there and here.
const GATEWAY_SURFACE: &[(&str, &[&str])] = &[
    ("api", &["deployments", "events", "openapi", "stacks"]),
    ("auth", &["command", "roles", "token"]),
    (
        "natsauth",
        &["accounts", "admin", "creates", "jwt", "perms", "push"],
    ),
    ("state", &[]),
    ("testing", &[]),
    ("tls", &[]),
    ("webhooks", &["target"]),
];

/// The agent's, as `agent/src/lib.rs` gives it.
const AGENT_SURFACE: &[(&str, &[&str])] = &[
    ("answer", &[]),
    ("config", &[]),
    ("connect", &[]),
    ("data", &["cli"]),
    ("doctor", &[]),
    ("guard", &[]),
    ("heartbeat", &[]),
    ("ledger", &[]),
    ("process", &[]),
    ("rights", &[]),
    ("upgrade", &[]),
    ("worker", &[]),
];

#[test]
fn the_gateway_and_the_agent_show_only_their_documented_modules() {
    let root = repo_root();
    for (src, documented) in [
        ("broker-gateway/src", GATEWAY_SURFACE),
        ("agent/src", AGENT_SURFACE),
    ] {
        let src = root.join(src);
        let expected: BTreeMap<String, BTreeSet<String>> = documented
            .iter()
            .map(|(m, inner)| {
                let inner = inner.iter().map(|s| (*s).to_owned()).collect();
                ((*m).to_owned(), inner)
            })
            .collect();
        assert_eq!(
            public_modules(&src),
            expected,
            "the public modules of {} (left) are not its documented surface (right): make a module `pub(crate)`, or write why it is public in its lib.rs and in this test",
            src.display()
        );
    }
}

#[test]
fn a_public_module_and_its_public_submodules_are_found() {
    // The reader itself: `pub mod` at the root and one level down (in `x.rs` or
    // `x/mod.rs`); `pub(crate) mod`, `mod`, a commented-out and a test module are not.
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "pub mod a;\npub mod b;\npub(crate) mod c;\nmod d;\n// pub mod e;\n#[cfg(test)]\npub mod f;\n",
    );
    write("a.rs", "pub mod inner;\npub(crate) mod hidden;\n");
    write(
        "b/mod.rs",
        "/// Doc.\npub mod deep {\n    pub fn f() {}\n}\n",
    );
    let found = public_modules(dir.path());
    let expected = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["inner".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["deep".to_owned()])),
    ]);
    assert_eq!(found, expected);
}

/// The `pub mod`s a crate root (`lib.rs` under `src`) declares, each with the `pub mod`s
/// its own file declares; `#[cfg(test)]` ones left out.
fn public_modules(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let declared = |file: &Path| -> BTreeSet<String> {
        let code = Source::read(file).code;
        code.lines()
            .filter_map(|line| line.trim_start().strip_prefix("pub mod "))
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect()
    };
    declared(&src.join("lib.rs"))
        .into_iter()
        .map(|module| {
            let file = [
                src.join(format!("{module}.rs")),
                src.join(&module).join("mod.rs"),
            ]
            .into_iter()
            .find(|f| f.is_file());
            let inner = file.map(|f| declared(&f)).unwrap_or_default();
            (module, inner)
        })
        .collect()
}

#[test]
fn only_proto_spells_subjects_and_bucket_names() {
    let root = repo_root();
    let names = BrokerNames::of_proto(&root.join("proto/src"));
    assert!(
        names.streams.contains("FLUE_REQ")
            && names.buckets.contains("flue_deployments")
            && names.subject_kinds.contains("evt"),
        "proto's names not found: {names:?}"
    );
    let mut offenders = Vec::new();
    for file in rust_files(&root) {
        let rel = file.strip_prefix(&root).expect("under the root").to_owned();
        if exempt(&rel) || Source::is_test_module_file(&file) {
            continue;
        }
        let source = Source::read(&file);
        for literal in &source.literals {
            if let Some(why) = names.spelled_in(literal, &rel) {
                offenders.push(format!("{}: {literal:?} ({why})", rel.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these string literals spell the broker's names, which only `proto` may (take them from flue_proto::subject, jsapi, event, operation, upgrade):\n{}",
        offenders.join("\n")
    );
}

/// Not read: `proto` (the one place that spells the names), the tests, and what is not
/// built into a binary of ours.
fn exempt(rel: &Path) -> bool {
    let first = rel.components().next().and_then(|c| c.as_os_str().to_str());
    matches!(first, Some("proto" | "tests" | "target" | "fuzz"))
        || rel
            .components()
            .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "benches")))
}

/// The broker's names as `proto` defines them.
#[derive(Debug, Default)]
struct BrokerNames {
    /// Stream names (`pub const …STREAM: &str`).
    streams: BTreeSet<String>,
    /// KV bucket names (`pub const …BUCKET: &str`).
    buckets: BTreeSet<String>,
    /// The kind token of Flue's subjects (`flue.<tenant>.<kind>.…`), from the
    /// `…SUBJECTS` patterns.
    subject_kinds: BTreeSet<String>,
}

/// NATS's own subject spaces, whose Flue spellings live in `proto::jsapi`.
const NATS_PREFIXES: [&str; 3] = ["$JS.", "$KV.", "$SYS."];

impl BrokerNames {
    fn of_proto(proto_src: &Path) -> Self {
        let mut names = Self::default();
        for file in rust_files(proto_src) {
            let text = std::fs::read_to_string(&file).expect("read a proto source");
            for line in text.lines() {
                let Some(rest) = line.trim().strip_prefix("pub const ") else {
                    continue;
                };
                let Some((name, value)) = rest.split_once(": &str = \"") else {
                    continue;
                };
                let value = value.trim_end_matches("\";").to_owned();
                if name.ends_with("STREAM") {
                    names.streams.insert(value);
                } else if name.ends_with("BUCKET") {
                    names.buckets.insert(value);
                } else if name.ends_with("SUBJECTS")
                    && let Some(kind) = value.split('.').nth(2)
                {
                    names.subject_kinds.insert(kind.to_owned());
                }
            }
        }
        names
    }

    /// Why `literal` (in `file`) spells one of the names, if it does.
    fn spelled_in(&self, literal: &str, file: &Path) -> Option<String> {
        if let Some(prefix) = NATS_PREFIXES.iter().find(|p| literal.contains(**p)) {
            return Some(format!("NATS subject {prefix}…"));
        }
        for prefix in ["KV_flue_", "_INBOX_flue"] {
            if literal.contains(prefix) {
                return Some(format!("{prefix}…"));
            }
        }
        if let Some(stream) = self.streams.iter().find(|s| has_token(literal, s)) {
            return Some(format!("stream {stream}"));
        }
        // The metrics' families are named as their buckets are (`flue_servers`, a gauge).
        let metric_families = file.ends_with("broker-gateway/src/metrics/scrape.rs");
        if !metric_families
            && let Some(bucket) = self.buckets.iter().find(|b| has_token(literal, b))
        {
            return Some(format!("bucket {bucket}"));
        }
        let mut rest = literal;
        while let Some(at) = rest.find("flue.") {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + "flue.".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || "_-.".contains(c)) {
                continue;
            }
            if let Some(kind) = after.split('.').nth(1)
                && self.subject_kinds.contains(kind)
            {
                return Some(format!("subject flue.….{kind}…"));
            }
        }
        None
    }
}

/// True when `name` is in `text` as a whole word (`FLUE_REQ` is not in `FLUE_REQ_X`).
fn has_token(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// Every `.rs` file under `dir`, build output and hidden directories left out.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The gateway crate's top-level modules and the `crate::` edges between them, each
/// with where it was first seen.
#[derive(Debug)]
struct ModuleGraph {
    modules: BTreeSet<String>,
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

impl ModuleGraph {
    fn read(src: &Path) -> Self {
        let mut modules = BTreeSet::new();
        for entry in std::fs::read_dir(src).expect("read the crate's src") {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_owned();
            if path.is_dir() {
                modules.insert(name);
            } else if let Some(stem) = name.strip_suffix(".rs")
                && stem != "lib"
                && stem != "main"
            {
                modules.insert(stem.to_owned());
            }
        }
        // `crate::Config` is `config`'s: the crate root's re-exports, by name.
        let reexports = Source::read(&src.join("lib.rs")).reexports();
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = modules
            .iter()
            .map(|m| (m.clone(), BTreeMap::new()))
            .collect();
        for file in rust_files(src) {
            let rel = file.strip_prefix(src).expect("under src").to_owned();
            let Some(top) = top_module(&rel) else {
                continue;
            };
            if !modules.contains(&top) || Source::is_test_module_file(&file) {
                continue;
            }
            let depth = module_depth(&rel);
            let source = Source::read(&file);
            for (item, path) in source.root_paths(depth) {
                let target = match reexports.get(&item) {
                    Some(module) => module.clone(),
                    None => item,
                };
                if target != top && modules.contains(&target) {
                    let seen = format!("{}: {path}", rel.display());
                    edges
                        .get_mut(&top)
                        .expect("a module")
                        .entry(target)
                        .or_insert(seen);
                }
            }
        }
        Self { modules, edges }
    }

    /// The strongly connected components of more than one module (Tarjan).
    fn cycles(&self) -> Vec<BTreeSet<String>> {
        struct Tarjan<'a> {
            graph: &'a ModuleGraph,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            found: Vec<BTreeSet<String>>,
        }
        impl<'a> Tarjan<'a> {
            fn visit(&mut self, v: &'a str) {
                let n = self.index.len();
                self.index.insert(v, n);
                self.low.insert(v, n);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.graph.edges[v].keys() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.on_stack.contains(w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        component.insert(w.to_owned());
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        self.found.push(component);
                    }
                }
            }
        }
        let mut tarjan = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            found: Vec::new(),
        };
        for module in &self.modules {
            if !tarjan.index.contains_key(module.as_str()) {
                tarjan.visit(module);
            }
        }
        tarjan.found
    }

    /// Each cycle's modules and its edges, each with where it is.
    fn describe(&self, cycles: &[BTreeSet<String>]) -> String {
        let mut text = String::new();
        for cycle in cycles {
            text.push_str(&format!("{} modules: {cycle:?}\n", cycle.len()));
            for from in cycle {
                for (to, seen) in &self.edges[from] {
                    if cycle.contains(to) {
                        text.push_str(&format!("  {from} -> {to}   ({seen})\n"));
                    }
                }
            }
        }
        text
    }
}

/// The top-level module a file under `src` belongs to (`api/error.rs` → `api`).
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.strip_suffix(".rs").unwrap_or(first).to_owned())
}

/// How deep below the crate root a file's module is: `api.rs` and `api/mod.rs` 1,
/// `api/error.rs` 2.
fn module_depth(rel: &Path) -> usize {
    let parts = rel.components().count();
    match rel.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs") => parts - 1,
        _ => parts,
    }
}

/// A Rust source as this test reads it: code without comments, string literals emptied
/// (`""`) and taken out, `#[cfg(test)]` items removed.
struct Source {
    code: String,
    literals: Vec<String>,
    /// Names of `#[cfg(test)] mod name;` declarations (modules in their own file).
    test_modules: Vec<String>,
}

impl Source {
    fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).expect("read a source file");
        let (code, literals) = lex(&text);
        let (code, removed, test_modules) = without_test_items(&code);
        let literals = literals
            .into_iter()
            .filter(|(at, _)| !removed.iter().any(|r| r.contains(at)))
            .map(|(_, literal)| literal)
            .collect();
        Self {
            code,
            literals,
            test_modules,
        }
    }

    /// True when `file` is the file of a module its parent declares `#[cfg(test)]`
    /// (`responses/tests.rs` of `#[cfg(test)] mod tests;` in `responses.rs`).
    fn is_test_module_file(file: &Path) -> bool {
        let (name, dir) = match file.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs") => {
                let dir = file.parent().expect("mod.rs in a dir");
                (dir.file_name(), dir.parent())
            }
            _ => (file.file_stem(), file.parent()),
        };
        let (Some(name), Some(dir)) = (name.and_then(|n| n.to_str()), dir) else {
            return false;
        };
        // The declaring file: `<dir>.rs`, `<dir>/mod.rs`, or the crate root.
        let candidates = [
            dir.with_extension("rs"),
            dir.join("mod.rs"),
            dir.join("lib.rs"),
            dir.join("main.rs"),
        ];
        candidates
            .iter()
            .filter(|c| c.is_file() && c.as_path() != file)
            .any(|c| Self::read(c).test_modules.iter().any(|m| m == name))
    }

    /// The crate root's `pub use module::…::Name;` re-exports: name → module.
    fn reexports(&self) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        for item in self.code.split(';') {
            let Some(path) = item.trim().strip_prefix("pub use ") else {
                continue;
            };
            let path = path.trim();
            let (path, alias) = match path.split_once(" as ") {
                Some((p, a)) => (p.trim(), Some(a.trim())),
                None => (path, None),
            };
            let module = path.split("::").next().unwrap_or("").to_owned();
            if let Some(name) = alias.or(path.rsplit("::").next()) {
                map.insert(name.to_owned(), module);
            }
        }
        map
    }

    /// The first segment of every path that starts at the crate root (`crate::x::…`,
    /// `$crate::x`, a `use crate::{x, y::z}` group, or `super::` as many times as the
    /// file is deep), with the path as written.
    fn root_paths(&self, depth: usize) -> Vec<(String, String)> {
        let code = self.code.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let name_at = |from: usize| {
            let len = code[from..].iter().take_while(|b| word(**b)).count();
            self.code[from..from + len].to_owned()
        };
        let mut found = Vec::new();
        let mut at = 0;
        while at < code.len() {
            let rest = &code[at..];
            let after_word = at > 0 && word(code[at - 1]);
            let prefix_len = if rest.starts_with(b"crate::")
                && (!after_word || code[..at].ends_with(b"$"))
            {
                "crate::".len()
            } else if rest.starts_with(b"super::") && !after_word && !code[..at].ends_with(b"::") {
                let mut len = 0;
                while code[at + len..].starts_with(b"super::") {
                    len += "super::".len();
                }
                if len / "super::".len() != depth {
                    at += len;
                    continue;
                }
                len
            } else {
                at += 1;
                continue;
            };
            let after = at + prefix_len;
            let written = &self.code[at..after];
            if code.get(after) == Some(&b'{') {
                let group = &self.code[after + 1..];
                let close = matching_brace(group);
                for element in split_top_level(&group[..close]) {
                    let element = element.trim();
                    let name: String = element
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() && name != "self" {
                        found.push((name, format!("{written}{{{element}}}")));
                    }
                }
                at = after + 1 + close;
            } else {
                let name = name_at(after);
                let path_len = code[after..]
                    .iter()
                    .take_while(|b| word(**b) || **b == b':')
                    .count();
                if !name.is_empty() {
                    let path = &self.code[after..after + path_len];
                    let group = if path.ends_with("::") { "{…}" } else { "" };
                    found.push((name, format!("{written}{path}{group}")));
                }
                at = after + path_len.max(1);
            }
        }
        found
    }
}

/// Where the `}` closing a group whose `{` was just before `text` is.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// A use group's elements (`a::{b, c}, d` → `a::{b, c}`, `d`).
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[from..]);
    parts
}

/// The code with comments removed and each string literal replaced by `""`, and the
/// literals with where their `""` is in the code.
fn lex(text: &str) -> (String, Vec<(usize, String)>) {
    let c: Vec<char> = text.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut code = String::with_capacity(text.len());
    let mut literals = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            code.push(' ');
            continue;
        }
        let starts_word = i == 0 || !ident(c[i - 1]);
        if starts_word && (ch == 'r' || (ch == 'b' && next == Some('r'))) {
            let mut j = if ch == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) == Some(&'"') {
                let begin = j + 1;
                let mut end = begin;
                while end < c.len()
                    && !(c[end] == '"' && (0..hashes).all(|k| c.get(end + 1 + k) == Some(&'#')))
                {
                    end += 1;
                }
                literals.push((code.len(), c[begin..end.min(c.len())].iter().collect()));
                code.push_str("\"\"");
                i = end + 1 + hashes;
                continue;
            }
        }
        if ch == '"' {
            let mut j = i + 1;
            let mut literal = String::new();
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    literal.push(c[j]);
                    j += 1;
                }
                if j < c.len() {
                    literal.push(c[j]);
                }
                j += 1;
            }
            literals.push((code.len(), literal));
            code.push_str("\"\"");
            i = j + 1;
            continue;
        }
        if ch == '\'' {
            // A char literal ('x', '\n', '\''), or a lifetime or label ('a).
            if next == Some('\\') {
                let mut j = i + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                code.push_str("' '");
                i = j + 1;
                continue;
            }
            if c.get(i + 2) == Some(&'\'') {
                code.push_str("' '");
                i += 3;
                continue;
            }
        }
        code.push(ch);
        i += 1;
    }
    (code, literals)
}

/// `code` without its `#[cfg(test)]` items, the byte ranges removed, and the names of the
/// test modules declared in their own file.
fn without_test_items(code: &str) -> (String, Vec<std::ops::Range<usize>>, Vec<String>) {
    const ATTR: &str = "#[cfg(test)]";
    let mut removed = Vec::new();
    let mut modules = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(ATTR) {
        let start = from + found;
        let mut at = start + ATTR.len();
        // Further attributes of the same item.
        loop {
            let rest = &code[at..];
            let trimmed = rest.trim_start();
            at += rest.len() - trimmed.len();
            if trimmed.starts_with("#[") {
                let mut depth = 0usize;
                for (i, c) in trimmed.char_indices() {
                    match c {
                        '[' => depth += 1,
                        ']' => {
                            depth -= 1;
                            if depth == 0 {
                                at += i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            } else {
                break;
            }
        }
        let item = &code[at..];
        let brace = item.find('{');
        let semi = item.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if b < s => at + b + 1 + matching_brace(&item[b + 1..]) + 1,
            (Some(b), None) => at + b + 1 + matching_brace(&item[b + 1..]) + 1,
            (_, Some(s)) => {
                let head = item[..s].trim();
                if let Some((_, name)) = head.rsplit_once("mod ") {
                    modules.push(name.trim().to_owned());
                }
                at + s + 1
            }
            (None, None) => code.len(),
        };
        let end = end.min(code.len());
        removed.push(start..end);
        from = end;
    }
    let mut kept = String::with_capacity(code.len());
    let mut last = 0;
    for range in &removed {
        kept.push_str(&code[last..range.start]);
        last = range.end;
    }
    kept.push_str(&code[last..]);
    (kept, removed, modules)
}
