# SPDX-License-Identifier: Apache-2.0
"""The stand-in's /metrics: SGLang 0.5.23's own metric names, types and label sets (read from
srt/observability/metrics_collector.py of the parse venv), values from standin.json."""
import ast
import json
import os
import sys
import urllib.request

import pytest

from conftest import REPO, kimi_params, parse_venv_python, plan, real_dialect, require_parse_venv
from test_standin import CHAT, call, free_port, start

from ansible_collections.ct200.deploy.plugins.module_utils import monitoring

sys.path.insert(0, os.path.join(REPO, "tests", "support", "sglang_standin"))
import sglang_standin  # noqa: E402


def collector_source(version="0.5.23"):
    python = parse_venv_python(version)
    venv = os.path.dirname(os.path.dirname(python))
    path = os.path.join(venv, "lib", "python3.11", "site-packages", "sglang", "srt", "observability",
                        "metrics_collector.py")
    if not os.path.isfile(path):
        require_parse_venv(version)  # skips (fails in CI) with the command that builds it
        pytest.fail("the SGLang %s parse venv has no %s: the metrics moved; update this test" % (version, path))
    with open(path, encoding="utf-8") as handle:
        return ast.parse(handle.read())


def _dict_keys(node):
    return tuple(k.value for k in node.keys if isinstance(k, ast.Constant))


def _labelnames(node, base):
    """labels.keys() / [*labels.keys(), "x"] / list(labels.keys()) + ["x"] -> the label tuple."""
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "keys":
        return base
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "list":
        return _labelnames(node.args[0], base)
    if isinstance(node, ast.List):
        out = ()
        for elt in node.elts:
            out += _labelnames(elt.value, base) if isinstance(elt, ast.Starred) else (elt.value,)
        return out
    if isinstance(node, ast.BinOp):
        return _labelnames(node.left, base) + _labelnames(node.right, base)
    raise AssertionError("unknown labelnames form: %s" % ast.dump(node))


def sglang_metrics(tree):
    """{name: (type, labels)} of SGLang's scheduler and tokenizer collectors, with their base label sets."""
    bases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "tokenizer_metric_labels":
            bases["TokenizerMetricsCollector"] = next(_dict_keys(n.value) for n in ast.walk(node)
                                                      if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict))
        if isinstance(node, ast.ClassDef) and node.name == "SchedulerMetricsCollector":
            init_new = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "init_new")
            bases["SchedulerMetricsCollector"] = next(
                _dict_keys(n.value) for n in ast.walk(init_new) if isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Dict) and "model_name" in _dict_keys(n.value))
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name in bases):
            continue
        for call_node in ast.walk(node):
            if not (isinstance(call_node, ast.Call) and getattr(call_node.func, "id", "") in
                    ("Gauge", "Counter", "Histogram")):
                continue
            kw = {k.arg: k.value for k in call_node.keywords}
            if "name" in kw and isinstance(kw["name"], ast.Constant) and "labelnames" in kw:
                found[kw["name"].value] = (call_node.func.id.lower(),
                                           _labelnames(kw["labelnames"], bases[node.name]))
    return bases, found


def test_standin_metric_table_is_sglangs():
    bases, sglang = sglang_metrics(collector_source())
    assert bases["SchedulerMetricsCollector"] == sglang_standin.SCHEDULER_LABELS
    assert bases["TokenizerMetricsCollector"] == sglang_standin.TOKENIZER_LABELS
    for name, kind, _help, extra in sglang_standin.METRICS:
        assert name in sglang, "%s is not a metric of SGLang 0.5.23" % name
        base = sglang_standin.TOKENIZER_LABELS if name in sglang_standin.TOKENIZER_METRICS \
            else sglang_standin.SCHEDULER_LABELS
        assert sglang[name] == (kind, base + tuple(extra)), name
    # the metrics are all served
    served = {m[0] for m in sglang_standin.METRICS}
    assert {"sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:num_queue_reqs", "sglang:token_usage",
            "sglang:gen_throughput", "sglang:time_to_first_token_seconds"} <= served


def test_standin_metrics_follow_standin_json(mdir):
    python = require_parse_venv("0.5.23")
    bases, sglang = sglang_metrics(collector_source())
    with open(os.path.join(mdir["kimi_draft"], "standin.json"), "w", encoding="utf-8") as handle:
        json.dump({"accept_length": 1.0, "decode_tok_s": 12.5, "queue_reqs": 7, "token_usage": 0.97,
                   "ttft_s": 0.3}, handle)
    port = free_port()
    _spec, _resolved, argv = plan(kimi_params(mdir, port=port), real_dialect("0.5.23"))
    proc, _statuses = start(python, argv, port)
    try:
        url = "http://127.0.0.1:%d/metrics" % port
        before = monitoring.parse_exposition(urllib.request.urlopen(url, timeout=5).read().decode())
        assert monitoring.metric_value(before, "sglang:spec_accept_length") is None  # no verify step yet
        for _attempt in range(3):
            assert call("http://127.0.0.1:%d/v1/chat/completions" % port, CHAT)[0] == 200
        with urllib.request.urlopen(url, timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            samples = monitoring.parse_exposition(answer.read().decode())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for name, labels, _value in samples:
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[:-len(suffix)] in sglang:
                family = name[:-len(suffix)]
        kind, labelnames = sglang[family]
        expect = set(labelnames) | ({"le"} if name.endswith("_bucket") else set())
        assert set(labels) == expect, (name, labels)
        assert labels["model_name"] == "kimi-k2.6"

    def value(name):
        return monitoring.metric_value(samples, name)
    assert value("sglang:spec_accept_length") == 1.0
    assert value("sglang:spec_accept_rate") == 0.0
    assert value("sglang:gen_throughput") == 12.5
    assert value("sglang:num_queue_reqs") == 7
    assert value("sglang:token_usage") == 0.97
    assert value("sglang:num_requests_total") == 3
    buckets = {labels["le"]: v for name, labels, v in samples if name == "sglang:time_to_first_token_seconds_bucket"}
    assert buckets["0.2"] == 0 and buckets["0.4"] == 3 and buckets["+Inf"] == 3
    assert value("sglang:time_to_first_token_seconds_sum") == pytest.approx(0.9)
