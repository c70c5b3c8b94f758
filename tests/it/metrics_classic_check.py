"""Strict check of a classic Prometheus text exposition (format 0.0.4) on stdin, with the
Prometheus Python client's parser (prometheus-client, pinned in scripts/test.sh).

The parser itself accepts a sample outside any declared family (it makes it an untyped
family of its own), so this also fails on that: every family must have the type its
`# TYPE` line declares and its `# HELP`, every `# TYPE` names a family once, and no
OpenMetrics-only line (`# UNIT`, `# EOF`) appears. Prints the families it read.
"""

import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
problems = []
for line in text.splitlines():
    if line.startswith("# UNIT ") or line == "# EOF":
        problems.append(f"OpenMetrics-only line: {line}")
declared = [line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")]
if len(declared) != len(set(declared)):
    problems.append(f"a family declared twice: {sorted(declared)}")
families = list(text_string_to_metric_families(text))
for family in families:
    if family.type in ("untyped", "unknown"):
        names = sorted({s.name for s in family.samples})
        problems.append(f"samples outside their declared family: {names}")
    elif not family.documentation:
        problems.append(f"family {family.name} has no HELP")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print("\n".join(f"{f.name} {f.type} {len(f.samples)}" for f in families))
