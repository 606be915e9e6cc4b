# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (roles/monitoring/files/grafana-ct200-sglang.json): every expression is valid PromQL
(promtool) and names only metrics that exist: the stand-in's /metrics (SGLang's own names, checked against SGLang
by tests/sglang/test_standin_metrics.py), Prometheus's `up`, or a recording rule of the role."""
import json
import os
import re
import subprocess
import sys

import yaml

import prometheus_bin

REPO = prometheus_bin.REPO
DASHBOARD = os.path.join(REPO, "roles", "monitoring", "files", "grafana-ct200-sglang.json")
sys.path.insert(0, os.path.join(REPO, "tests", "support", "sglang_standin"))
import sglang_standin  # noqa: E402

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}


def expressions():
    with open(DASHBOARD, encoding="utf-8") as handle:
        dash = json.load(handle)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dash["templating"]["list"] if v.get("type") == "query"]
    return exprs


def metric_names(expr):
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                   # strings
    text = re.sub(r"\{[^}]*\}", "", text)                              # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)                             # ranges
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        word, rest = match.group(0), text[match.end():].lstrip()
        if word in KEYWORDS or rest.startswith("(") or word.startswith("$"):
            continue
        if text[max(0, match.start() - 1)] == "$":
            continue
        names.add(word)
    return names


def known_metrics():
    known = {"up"}
    for name, kind, _help, _extra in sglang_standin.METRICS:
        known |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
    rules = yaml.safe_load(prometheus_bin.render("ct200.rules.yml.j2"))
    known |= {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    known.add("ct200:min_accept_length")  # floors.rules.yml (one per speculative instance)
    return known


def test_every_dashboard_expression_names_an_existing_metric():
    known, exprs = known_metrics(), expressions()
    assert len(exprs) >= 8
    used = set()
    for expr in exprs:
        query = re.sub(r"^label_values\((.*), *\w+\)$", r"\1", expr)
        names = metric_names(query)
        assert names, expr
        assert names <= known, (expr, names - known)
        used |= names
    # the dashboard shows what the issue names
    assert {"ct200:accept_length:avg5m", "sglang:num_queue_reqs", "sglang:token_usage",
            "ct200:gen_throughput:avg5m", "sglang:spec_accept_rate"} <= used


def test_the_name_check_catches_a_wrong_name():
    assert metric_names('sum by (ct200_host) (rate(sglang:typo_total{job="sglang"}[5m]))') == {"sglang:typo_total"}
    assert not metric_names("rate(sglang:typo_total[5m])") <= known_metrics()


def test_every_dashboard_expression_is_valid_promql(tmp_path):
    """Each expression as a recording rule ($host -> .*), checked by promtool."""
    rules = []
    for number, expr in enumerate(expressions()):
        query = re.sub(r"^label_values\((.*), *\w+\)$", r"\1", expr).replace("$host", ".*")
        rules.append({"record": "dashboard:panel_%d" % number, "expr": query})
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([prometheus_bin.binary("promtool"), "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
