# SPDX-License-Identifier: Apache-2.0
"""plugins/module_utils/monitoring.py: scrape targets from the inventory, the Prometheus text format and the
verdicts of `ct200 status`."""
import json

import pytest

from ansible_collections.ct200.deploy.plugins.module_utils import monitoring as mon

KIMI = {"name": "kimi", "port": 30000, "host": "0.0.0.0", "served_model_name": "kimi-k2.6",
        "speculative": {"algorithm": "dflash"}}


def test_endpoints_wildcard_is_scraped_at_the_hosts_address_and_defaults_merge():
    eps = mon.instance_endpoints("h1", "10.0.0.1", [KIMI, {"name": "small", "port": "30001", "host": "10.0.0.9"}],
                                 defaults={"min_accept_length": 2.5})
    assert eps[0] == {"host": "h1", "instance": "kimi", "address": "10.0.0.1", "port": 30000, "model": "kimi-k2.6",
                      "speculative": True, "min_accept_length": 2.5, "listen": "0.0.0.0"}
    assert eps[1]["address"] == "10.0.0.9" and eps[1]["speculative"] is False and eps[1]["model"] == "small"


@pytest.mark.parametrize("item, needle", [
    ({"name": "kimi", "port": "x"}, "not a number"),
    ({"name": "kimi", "port": 70000}, "out of range"),
    ({"name": "../x", "port": 1}, "not a plain name"),
    ("kimi", "not a mapping"),
])
def test_endpoints_refuse_bad_items(item, needle):
    with pytest.raises(mon.MonitoringError, match=needle):
        mon.instance_endpoints("h1", "10.0.0.1", [item])


def by_host(*names, listen="0.0.0.0"):
    return {n: ("10.0.0.%d" % i, mon.instance_endpoints(n, "10.0.0.%d" % i, [dict(KIMI, host=listen)]))
            for i, n in enumerate(names, 1)}


def test_file_sd_follows_the_inventory():
    files = mon.monitoring_files(by_host("h1", "h2"), "mon", router={"host": "h1", "address": "10.0.0.1", "port": 29000},
                                 host_exporter_port=9100)
    instances = json.loads(files["instances.json"])
    assert [g["targets"] for g in instances] == [["10.0.0.1:30000"], ["10.0.0.2:30000"]]
    assert instances[0]["labels"] == {"ct200_host": "h1", "ct200_instance": "kimi", "model": "kimi-k2.6",
                                      "speculative": "true", "ct200_min_accept_length": "2"}
    assert json.loads(files["router.json"]) == [{"targets": ["10.0.0.1:29000"],
                                                 "labels": {"ct200_host": "h1", "ct200_instance": "router"}}]
    assert [g["targets"] for g in json.loads(files["hosts.json"])] == [["10.0.0.1:9100"], ["10.0.0.2:9100"]]
    floors = json.loads(files["floors.rules.yml"])["groups"][0]["rules"]
    assert [(r["labels"]["ct200_host"], r["expr"]) for r in floors] == [("h1", "vector(2)"), ("h2", "vector(2)")]
    # a host removed from the inventory leaves every file
    fewer = mon.monitoring_files(by_host("h2"), "mon")
    assert "h1" not in fewer["instances.json"] and "h1" not in fewer["floors.rules.yml"]
    assert json.loads(fewer["router.json"]) == [] and json.loads(fewer["hosts.json"]) == []


def test_file_sd_refuses_a_limited_run_and_unreachable_loopback():
    hosts = by_host("h1")
    hosts["h2"] = None
    with pytest.raises(mon.MonitoringError, match="h2 has no scrape endpoints.*--limit"):
        mon.monitoring_files(hosts, "mon")
    with pytest.raises(mon.MonitoringError, match="h1/kimi listens on loopback.*ct200_sglang_host"):
        mon.monitoring_files(by_host("h1", listen="127.0.0.1"), "mon")
    # on the monitoring host itself, or hosts that are on loopback themselves (sandbox), loopback is fine
    assert "127.0.0.1:30000" in mon.monitoring_files(by_host("h1", listen="127.0.0.1"), "h1")["instances.json"]
    local = {"h1": ("127.0.0.1", mon.instance_endpoints("h1", "127.0.0.1", [dict(KIMI, host="127.0.0.1")]))}
    assert "127.0.0.1:30000" in mon.monitoring_files(local, "mon")["instances.json"]


def test_exposition_parser():
    text = ('# HELP x y\n# TYPE sglang:token_usage gauge\n'
            'sglang:token_usage{model_name="k",tp_rank="0"} 0.5\n'
            'sglang:token_usage{model_name="k",tp_rank="1"} 0.75 1700000000\n'
            'sglang:num_queue_reqs{a="q\\"uote"} 3\nup 1\n')
    samples = mon.parse_exposition(text)
    assert samples[2] == ("sglang:num_queue_reqs", {"a": 'q"uote'}, 3.0) and samples[3] == ("up", {}, 1.0)
    assert mon.metric_value(samples, "sglang:token_usage") == 1.25
    assert mon.metric_value(samples, "sglang:token_usage", "max") == 0.75
    assert mon.metric_value(samples, "absent") is None
    with pytest.raises(mon.MonitoringError, match="line 1"):
        mon.parse_exposition("{not a metric} 1\n")
    with pytest.raises(mon.MonitoringError, match="malformed labels"):
        mon.parse_exposition('x{a=b} 1\n')


def row(**over):
    base = {"health": "ok", "speculative": True, "accept_length": 3.4, "min_accept_length": None,
            "token_usage": 0.5, "queue_reqs": 0, "token_state": "in_sync", "in_rotation": None}
    base.update(over)
    return base


@pytest.mark.parametrize("over, broken", [
    ({}, []),
    ({"accept_length": 1.0}, ["accept length 1.00 < 2.00"]),
    ({"accept_length": 2.2, "min_accept_length": 2.5}, ["accept length 2.20 < 2.50"]),
    ({"accept_length": 1.0, "speculative": False}, []),
    ({"accept_length": None}, []),
    ({"health": "starting"}, ["health starting"]),
    ({"token_usage": 0.97}, ["KV use 97% > 95%"]),
    ({"queue_reqs": 40}, ["queue 40 > 32"]),
    ({"token_state": "drift"}, ["token drift"]),
    ({"in_rotation": False}, ["healthy but out of rotation"]),
    ({"in_rotation": False, "health": "starting"}, ["health starting"]),
])
def test_verdict(over, broken):
    assert mon.instance_verdict(row(**over)) == broken


def test_status_rows_sources_of_the_acceptance_length():
    ep = mon.instance_endpoints("h1", "127.0.0.1", [KIMI])[0]
    metrics = "sglang:spec_accept_length{tp_rank=\"0\"} 1.5\nsglang:gen_throughput 30\nsglang:token_usage 0.2\n"
    report = {"expected_fingerprint": "sha256:aaa", "prometheus": {"h1/kimi": 3.1}, "hosts": [
        {"host": "h1", "fingerprint": "sha256:bbb", "release_state": {"current": "r1"},
         "release_records": {"r1": {"target": {"commit": "c" * 40}}},
         "instances": [{"endpoint": ep, "health_status": 200, "metrics": metrics}]}]}
    (r,) = mon.status_rows(report)
    assert (r["accept_length"], r["accept_source"]) == (3.1, "prometheus (5m)")
    assert r["release"] == "r1 (cccccccccccc)" and r["token_state"] == "drift" and r["verdict"] == ["token drift"]
    report["prometheus"] = None
    (r,) = mon.status_rows(report)
    assert (r["accept_length"], r["accept_source"], r["decode_tok_s"]) == (1.5, "metrics", 30.0)
    assert "accept length 1.50 < 2.00" in r["verdict"]
    report["hosts"][0]["instances"][0].update(metrics=None, health_status=-1,
                                              server_info={"internal_states": [{"avg_spec_accept_length": 2.9}]})
    (r,) = mon.status_rows(report, in_rotation=lambda host, instance: True)
    assert (r["accept_length"], r["accept_source"], r["health"], r["in_rotation"]) == (2.9, "server_info",
                                                                                       "unreachable", True)
    report["rotation"] = {"h1/kimi": False}
    (r2,) = mon.status_rows(report, in_rotation=lambda host, instance: True)
    assert r2["in_rotation"] is False  # the report's router answer wins
    table = mon.status_table([r])
    assert table.splitlines()[0].split()[:4] == ["HOST", "INSTANCE", "HEALTH", "RELEASE"]
    assert "2.90" in table and "yes" in table


def test_prometheus_answer():
    answer = {"status": "success", "data": {"result": [
        {"metric": {"ct200_host": "h1", "ct200_instance": "kimi"}, "value": [1, "1.25"]},
        {"metric": {"ct200_host": "h2"}, "value": [1, "3"]}]}}
    assert mon.prometheus_accept_lengths(answer) == {"h1/kimi": 1.25}
    assert mon.prometheus_accept_lengths({"status": "error"}) == {}


def _router_report(mode, workers=None, router_host="r1"):
    answer = None if workers is None else {"workers": workers, "failed": False}
    return {"mode": mode, "router_host": router_host, "router_url": "http://127.0.0.1:30080", "router": answer}


@pytest.mark.parametrize("listen, host, workers, want", [
    # a wildcard listener is the host's traffic address in the router, as the drain step registered it
    ("0.0.0.0", {"traffic_address": "10.0.0.5"}, [{"url": "http://10.0.0.5:30000", "healthy": True}], True),
    ("0.0.0.0", {"traffic_address": "10.0.0.5"}, [{"url": "http://10.0.0.5:30000/", "healthy": False}], False),
    ("0.0.0.0", {"traffic_address": "10.0.0.5"}, [{"url": "http://10.0.0.6:30000", "healthy": True}], False),
    # loopback: the worker URL exists only for a router on the same host (or shared loopback)
    ("127.0.0.1", {"traffic_address": "10.0.0.5", "router_is_local": True},
     [{"url": "http://127.0.0.1:30000", "healthy": True}], True),
    ("127.0.0.1", {"traffic_address": "10.0.0.5", "router_is_local": False},
     [{"url": "http://127.0.0.1:30000", "healthy": True}], False),
])
def test_router_column_is_the_routers_own_worker_list(listen, host, workers, want):
    ep = dict(mon.instance_endpoints("h1", "127.0.0.1", [dict(KIMI, host=listen)])[0])
    assert mon.router_cell(_router_report("router", workers), host, ep) is want


def test_router_column_external_none_and_unknown():
    ep = mon.instance_endpoints("h1", "127.0.0.1", [KIMI])[0]
    assert mon.router_cell(_router_report("external"), {}, ep) == "external"
    assert mon.router_cell(_router_report("none"), {}, ep) == "none"
    assert mon.router_cell(_router_report("router"), {}, ep) is None  # no worker list: unknown, not "no"
    assert mon.router_cell(None, {}, ep) is None
    assert "no router host" in mon.router_summary(_router_report("router", router_host=""))
    unreachable = _router_report("router")
    unreachable["router"] = {"failed": True, "msg": "router http://127.0.0.1:30080 is unreachable"}
    assert "unreachable" in mon.router_summary(unreachable)
    assert "1 worker(s) in rotation of 2" in mon.router_summary(_router_report("router", [
        {"url": "http://10.0.0.5:30000", "healthy": True}, {"url": "http://10.0.0.6:30000", "healthy": False}]))
    assert mon.router_summary(_router_report("none")) is None


def test_status_table_router_cells():
    report = {"traffic": _router_report("external"), "hosts": [{"host": "h1", "fingerprint": "none", "instances": [
        {"endpoint": mon.instance_endpoints("h1", "127.0.0.1", [KIMI])[0], "health_status": 200}]}]}
    (row,) = mon.status_rows(report)
    assert row["in_rotation"] == "external" and "healthy but out of rotation" not in row["verdict"]
    assert mon.status_table([row]).splitlines()[1].split()[-2] == "external"


def test_monitoring_files_filter_accepts_loopback_only_where_the_hosts_share_the_namespace():
    """The demo's sandbox hosts share this machine's network namespace (ct200_traffic_shared_loopback, as the
    drain steps read it): a Prometheus on one of them scrapes the other's loopback instance. Elsewhere refused."""
    from ansible.errors import AnsibleFilterError
    from ansible_collections.ct200.deploy.plugins.filter.monitoring import monitoring_files
    eps = {h: mon.instance_endpoints(h, "127.0.0.1", [dict(KIMI, host="127.0.0.1")]) for h in ("h1", "h2")}
    shared = {h: {"ct200_monitoring_endpoints": e, "ct200_traffic_shared_loopback": True} for h, e in eps.items()}
    files = monitoring_files(["h1", "h2"], shared, "h1")
    assert json.loads(files["instances.json"])[1]["targets"] == ["127.0.0.1:30000"]
    apart = {h: {"ct200_monitoring_endpoints": e, "ansible_host": "10.0.0.%d" % i}
             for i, (h, e) in enumerate(eps.items(), 1)}
    with pytest.raises(AnsibleFilterError, match="h2/kimi listens on loopback"):
        monitoring_files(["h1", "h2"], apart, "h1")
