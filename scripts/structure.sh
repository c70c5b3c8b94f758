#!/usr/bin/env bash
# The tree's structure, measured (docs/testing.md, "Structure"): per crate, the largest import
# cycle among its top-level modules, lines of Rust, public items; the ten largest functions of
# the workspace; the tests ARCHITECTURE.md's invariants name that the tree does not hold.
# `--timings` also times a clean `cargo build --workspace` (in a fresh target dir) and the
# unit tests alone (every crate but flue-tests): minutes, so only on request.
# Reads the tree it runs in (the repository holding this script); needs bash and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
timings=false
for arg in "$@"; do
  case "$arg" in
    --timings) timings=true ;;
    -h | --help)
      sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      echo "usage: bash scripts/structure.sh [--timings]"
      exit 0
      ;;
    *)
      echo "error: unknown argument '$arg' (usage: bash scripts/structure.sh [--timings])" >&2
      exit 2
      ;;
  esac
done

echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
python3 - <<'PY'
import os, re, signal, sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly

# The crates (name, dir, module roots). A module root is a directory whose lib.rs / main.rs
# declares top-level modules; flue-tests has two (its harness library and the `it` test
# binary; each bench is a crate of its own, left out of the graph). fuzz/ is its own
# workspace, listed for its lines only.
CRATES = [
    ("flue-proto", "proto", ["proto/src"]),
    ("flue-gateway", "broker-gateway", ["broker-gateway/src"]),
    ("flue-agent", "agent", ["agent/src"]),
    ("flue-client", "engine-adapter/client", ["engine-adapter/client/src"]),
    ("flue-stack", "engine-adapter/stack", ["engine-adapter/stack/src"]),
    ("flue-cli", "engine-adapter/cli", ["engine-adapter/cli/src"]),
    ("flue-tests", "tests", ["tests/harness", "tests/it"]),
    ("flue-fuzz (own workspace)", "fuzz", []),
]


def strip(text):
    """The text with comments and the insides of string and char literals blanked out (each
    character replaced by a space, newlines kept, so offsets and line numbers stay), and a
    per-line flag: does the line hold code (anything but blanks and comments)?"""
    out = []
    n = len(text)
    i = 0
    code_line = set()
    line = 0
    depth = 0  # block comment nesting

    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if depth:
            if text.startswith("/*", i):
                depth += 1
                out.append("  ")
                i += 2
            elif text.startswith("*/", i):
                depth -= 1
                out.append("  ")
                i += 2
            else:
                if c == "\n":
                    line += 1
                out.append("\n" if c == "\n" else " ")
                i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            depth = 1
            out.append("  ")
            i += 2
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 260]) if c in "br" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            lit = text[i:end]
            code_line.add(line)
            out.append(lit[: m.end()] + blank(lit[m.end():-1 - len(m.group(1))]) + lit[-1 - len(m.group(1)):])
            line += lit.count("\n")
            i = end
            continue
        if c == '"' or (c == "b" and text.startswith('b"', i)):
            start = i
            i += 2 if c == "b" else 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i = min(i + 1, n)
            lit = text[start:i]
            code_line.add(line)
            out.append(lit[:1] + blank(lit[1:-1]) + lit[-1:])
            line += lit.count("\n")
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '\''), else a lifetime or label.
            m = re.match(r"'(\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", text[i:i + 12])
            if m:
                out.append("'" + " " * (m.end() - 2) + "'")
                code_line.add(line)
                i += m.end()
                continue
        if c == "\n":
            line += 1
        elif not c.isspace():
            code_line.add(line)
        out.append(c)
        i += 1
    return "".join(out), code_line


def rust_files(d):
    for dp, dns, fns in os.walk(d):
        dns[:] = sorted(x for x in dns if x != "target")
        for f in sorted(fns):
            if f.endswith(".rs"):
                yield os.path.join(dp, f)


cache = {}


def stripped(path):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        cache[path] = (raw,) + strip(raw)
    return cache[path]


def top_modules(root):
    """The top-level modules its lib.rs / main.rs declare (`mod x;` or `mod x { … }`)."""
    mods = set()
    for r in ("lib.rs", "main.rs"):
        p = os.path.join(root, r)
        if os.path.exists(p):
            mods |= set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)", stripped(p)[1], re.M))
    return mods


def use_tree_heads(tree):
    """The first path segment of each item of a `{…}` use tree (depth 1 only)."""
    heads, depth, expect = [], 0, True
    for tok in re.findall(r"\w+|::|[{},*]", tree):
        if tok == "{":
            depth += 1
            expect = depth == 1
        elif tok == "}":
            depth -= 1
        elif tok == ",":
            expect = depth == 1
        elif tok != "::" and depth == 1 and expect:
            heads.append(tok)
            expect = False
        else:
            expect = False
    return heads


def inline_mods(t):
    """The spans of the inline `mod x { … }` blocks of a blanked text."""
    spans = []
    for mm in re.finditer(r"\bmod\s+\w+\s*\{", t):
        depth, j = 0, mm.end() - 1
        while j < len(t):
            depth += {"{": 1, "}": -1}.get(t[j], 0)
            if depth == 0:
                break
            j += 1
        spans.append((mm.end(), j))
    return spans


def module_graph(root):
    mods = top_modules(root)
    edges = {m: set() for m in mods}
    for m in mods:
        files = []
        p = os.path.join(root, m + ".rs")
        if os.path.exists(p):
            files.append(p)
        d = os.path.join(root, m)
        if os.path.isdir(d):
            files += list(rust_files(d))
        for fp in files:
            t = stripped(fp)[1]
            # `super::` as many times as the file is deep below the root (an inline
            # `mod x { … }` one more) is the crate root too.
            rel = os.path.relpath(fp, root)
            base = rel.count(os.sep) - (1 if rel.endswith("mod.rs") else 0)
            inline = inline_mods(t)
            names = []
            for mm in re.finditer(r"\b(crate::|(?:super::)+)(\w+|\{)", t):
                if mm.group(1) != "crate::":
                    depth = base + sum(a < mm.start() < b for a, b in inline)
                    if mm.group(1).count("super") != depth + 1:
                        continue
                if mm.group(2) == "{":
                    end = re.compile(r"\}\s*;").search(t, mm.end())
                    names += use_tree_heads(t[mm.end() - 1:end.end() if end else len(t)])
                else:
                    names.append(mm.group(2))
            edges[m] |= {x for x in names if x in mods and x != m}
    return mods, edges


def sccs(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            s = []
            while True:
                w = stack.pop()
                on.discard(w)
                s.append(w)
                if w == v:
                    break
            out.append(sorted(s))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


print("\n== Largest import cycle among each crate's top-level modules")
print("   (modules a lib.rs/main.rs declares; an edge is a `crate::x` path or a `use crate::{x, …}`")
print("   item anywhere in a module's files, or a `super::…::x` that reaches the root; #[cfg(test)] code included)")
for name, _, roots in CRATES:
    for root in roots:
        if not os.path.isdir(root):
            continue
        mods, edges = module_graph(root)
        cycles = sorted((s for s in sccs(mods, edges) if len(s) > 1), key=len, reverse=True)
        label = f"{name} ({root})"
        if not cycles:
            print(f"{label}: {len(mods)} modules, no cycle")
            continue
        big = cycles[0]
        others = ", ".join(str(len(s)) for s in cycles[1:])
        print(f"{label}: {len(mods)} modules, largest cycle {len(big)}"
              + (f" (other cycles: {others})" if others else "") + ": " + " ".join(big))
        members = set(big)
        for a in big:
            print(f"    {a} -> {' '.join(sorted(edges[a] & members))}")

print("\n== Lines of Rust per crate (code: lines with anything but blanks and comments; doc comments are comments)")
print(f"{'crate':<28}{'files':>7}{'code':>9}{'total':>9}")
tc = tt = tf = 0
for name, d, _ in CRATES:
    files = list(rust_files(d))
    code = total = 0
    for f in files:
        raw, _, lines = stripped(f)
        total += raw.count("\n") + (0 if raw.endswith("\n") or not raw else 1)
        code += len(lines)
    print(f"{name:<28}{len(files):>7}{code:>9}{total:>9}")
    if "fuzz" not in name:
        tc, tt, tf = tc + code, tt + total, tf + len(files)
print(f"{'workspace (without fuzz)':<28}{tf:>7}{tc:>9}{tt:>9}")

print("\n== The 10 largest functions (lines from `fn` to its closing brace)")
print("   (a brace-matching scan of the comment- and string-blanked text: a fn a macro writes is not")
print("   seen, a nested fn counts in its parent too, closures are part of their fn)")
funcs = []
for name, d, _ in CRATES:
    if "fuzz" in name:
        continue
    for f in rust_files(d):
        t = stripped(f)[1]
        for m in re.finditer(r"\bfn\s+(\w+)", t):
            i, paren, body = m.end(), 0, None
            while i < len(t):
                c = t[i]
                if c in "([":
                    paren += 1
                elif c in ")]":
                    paren -= 1
                elif paren == 0 and c == ";":
                    break  # a declaration without a body
                elif paren == 0 and c == "{":
                    body = i
                    break
                i += 1
            if body is None:
                continue
            depth, j = 0, body
            while j < len(t):
                if t[j] == "{":
                    depth += 1
                elif t[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            start = t.count("\n", 0, m.start()) + 1
            end = t.count("\n", 0, j) + 1
            funcs.append((end - start + 1, m.group(1), f"{f}:{start}"))
funcs.sort(key=lambda x: (-x[0], x[2]))
for n, fname, where in funcs[:10]:
    print(f"{n:>6}  {fname:<40} {where}")

print("\n== Public items per crate (`pub` fn/struct/enum/trait/mod/const/static/type; not pub(crate)/pub(super)/pub use;")
print("   counted where written, so a pub item in a private module counts)")
KINDS = ["fn", "struct", "enum", "trait", "mod", "const", "static", "type"]
print(f"{'crate':<28}" + "".join(f"{k:>8}" for k in KINDS) + f"{'total':>8}")
PUB = re.compile(r"^\s*pub\s+(?:(?:async|unsafe|extern(?:\s+\"[^\"]*\")?)\s+)*(const\s+(?:async\s+|unsafe\s+)*fn|fn|struct|enum|trait|mod|const|static|type)\b", re.M)
for name, d, _ in CRATES:
    if "fuzz" in name:
        continue
    counts = dict.fromkeys(KINDS, 0)
    for f in rust_files(d):
        for k in PUB.findall(stripped(f)[1]):
            counts["fn" if k.endswith("fn") else k] += 1
    print(f"{name:<28}" + "".join(f"{counts[k]:>8}" for k in KINDS) + f"{sum(counts.values()):>8}")

print("\n== Public items reachable from each library's root (the same items, in files every module above")
print("   is a `pub mod` of, inline `mod`s not `pub` left out; `pub use` lines there counted apart, not followed)")


def reachable_files(root):
    """The files of the library at `root` (its lib.rs) whose every module up to the root is
    `pub mod`, each with the text spans of its inline modules that are not `pub`."""
    out = []
    todo = [(os.path.join(root, "lib.rs"), root)]
    while todo:
        path, child_dir = todo.pop()
        if not os.path.exists(path):
            continue
        t = stripped(path)[1]
        hidden = [
            span
            for mm, span in zip(re.finditer(r"\bmod\s+\w+\s*\{", t), inline_mods(t))
            if not re.search(r"(?:^|[^\w)])pub\s+$", t[max(0, mm.start() - 8):mm.start()])
        ]
        out.append((path, hidden))
        for name in re.findall(r"^\s*pub\s+mod\s+(\w+)\s*;", t, re.M):
            f = os.path.join(child_dir, name + ".rs")
            if os.path.exists(f):
                todo.append((f, os.path.join(child_dir, name)))
            else:
                todo.append((os.path.join(child_dir, name, "mod.rs"), os.path.join(child_dir, name)))
    return out


print(f"{'crate':<28}{'files':>7}" + "".join(f"{k:>8}" for k in KINDS) + f"{'total':>8}{'pub use':>9}")
PUB_USE = re.compile(r"^\s*pub\s+use\b", re.M)
for name, d, roots in CRATES:
    src = roots[0] if roots else ""
    if "fuzz" in name or not os.path.exists(os.path.join(src, "lib.rs")):
        continue
    counts = dict.fromkeys(KINDS, 0)
    files = reachable_files(src)
    uses = 0
    for f, hidden in files:
        t = stripped(f)[1]
        for a, b in hidden:
            t = t[:a] + " " * (b - a) + t[b:]
        for k in PUB.findall(t):
            counts["fn" if k.endswith("fn") else k] += 1
        uses += len(PUB_USE.findall(t))
    print(f"{name:<28}{len(files):>7}" + "".join(f"{counts[k]:>8}" for k in KINDS) + f"{sum(counts.values()):>8}{uses:>9}")

print("\n== Tests ARCHITECTURE.md's invariants name that are not in the tree")
CRATE_DIRS = {"flue_" + n[5:].replace("-", "_"): d for n, d, _ in CRATES if "fuzz" not in n}
CRATE_DIRS["flue_gateway"] = "broker-gateway"
arch = open("ARCHITECTURE.md", encoding="utf-8").read()
section = arch[arch.find("## Invariants"):]
# A test is named by its path; its name is a sentence (four words or more).
named = sorted(set(re.findall(r"`((?:\w+::)+[a-z0-9]+(?:_[a-z0-9]+){3,})`", section)))
missing = []
for path in named:
    parts = path.split("::")
    test = parts[-1]
    if parts[0] in CRATE_DIRS:
        base, mods = os.path.join(CRATE_DIRS[parts[0]], "src"), parts[1:-1]
    else:
        base, mods = "tests/it", parts[:-1]
    # Its file: a module's own file (name.rs or name/mod.rs), an inline module in it.
    files = [
        f
        for k in range(len(mods), 0, -1)
        for f in (os.path.join(base, *mods[:k]) + ".rs", os.path.join(base, *mods[:k], "mod.rs"))
    ]
    if not any(
        os.path.exists(f) and re.search(r"\bfn\s+" + test + r"\b", stripped(f)[1]) for f in files
    ):
        missing.append(path)
print(f"{len(named) - len(missing)} of the {len(named)} named tests found")
for path in missing:
    print(f"    missing: {path}")
PY

if $timings; then
  echo
  echo "== Timings (this machine: $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg))"
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  start=$(date +%s)
  CARGO_TARGET_DIR="$scratch/target" cargo build --workspace --quiet
  echo "clean cargo build --workspace (fresh target dir, dependencies included): $(($(date +%s) - start)) s"
  # The unit tests alone: every crate but flue-tests (its end-to-end suite needs the binaries
  # and a nats-server). The first run builds the test binaries; the second is timed.
  if cargo nextest --version >/dev/null 2>&1; then
    unit=(cargo nextest run --workspace --exclude flue-tests --no-fail-fast --status-level fail --final-status-level fail)
  else
    unit=(cargo test --workspace --exclude flue-tests --no-fail-fast --quiet)
  fi
  start=$(date +%s)
  CARGO_TARGET_DIR="$scratch/target" "${unit[@]}" >"$scratch/unit-build.log" 2>&1 || { cat "$scratch/unit-build.log" >&2; exit 1; }
  echo "unit tests, building them and running (${unit[*]}): $(($(date +%s) - start)) s"
  start=$(date +%s)
  CARGO_TARGET_DIR="$scratch/target" "${unit[@]}" >"$scratch/unit.log" 2>&1 || { cat "$scratch/unit.log" >&2; exit 1; }
  echo "unit tests, running only (built): $(($(date +%s) - start)) s;" \
    "$(grep -E 'Summary|test result' "$scratch/unit.log" | tail -1 | sed 's/^ *//')"
fi
