# -*- coding: utf-8 -*-
# SPDX-License-Identifier: Apache-2.0
"""Observability decisions: Prometheus scrape targets from the inventory, the Prometheus text format,
and the per-instance verdicts of ``ct200 status``.

One place for the rules an instance is held to: the alert rules of roles/monitoring
(files/rules/ct200.rules.yml) and ``ct200 status`` use the same thresholds, named in RULES.
"""

from __future__ import absolute_import, division, print_function

import ipaddress
import json
import math
import re

from ansible_collections.ct200.deploy.plugins.module_utils import traffic
from ansible_collections.ct200.deploy.plugins.module_utils.redact import shorten

__metaclass__ = type

# Thresholds shared by the alert rules (roles/monitoring defaults) and `ct200 status`.
RULES = {
    "min_accept_length": 2.0,   # speculative instance: acceptance length floor (1.0 = the drafter accepts nothing)
    "max_token_usage": 0.95,    # KV cache use
    "max_queue_reqs": 32,       # waiting requests
}

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
MAX_EXPOSITION_BYTES = 4 * 1024 * 1024
_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\Z')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_TARGET_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z')


class MonitoringError(ValueError):
    """Bad input for the monitoring decisions (message names the cause and the fix)."""


# ---------------------------------------------------------------------------------------------------------------
# Scrape targets (file_sd) from the inventory
# ---------------------------------------------------------------------------------------------------------------

def _is_loopback(address):
    text = str(address or "").strip().strip("[]")
    if text.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _is_unspecified(address):
    text = str(address or "").strip().strip("[]")
    try:
        return ipaddress.ip_address(text).is_unspecified
    except ValueError:
        return False


def _hostport(address, port):
    text = str(address).strip().strip("[]")
    return "[%s]:%d" % (text, port) if ":" in text else "%s:%d" % (text, port)


def _port(value, what):
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise MonitoringError("%s: port %r is not a number: give the instance's port (1-65535)" % (what, value))
    if not 0 < port < 65536:
        raise MonitoringError("%s: port %d is out of range: give the instance's port (1-65535)" % (what, port))
    return port


def instance_endpoints(host, address, instances, defaults=None):
    """The scrape endpoints of one host's SGLang instances (the sglang_service_instances items, defaults
    merged under each): [{"host", "instance", "address", "port", "model", "speculative", "min_accept_length",
    "listen"}] (``listen``: the configured listen address, before a wildcard is replaced by ``address``).

    ``address`` is how the monitoring host reaches this host (ansible_host). An instance listening on
    0.0.0.0/:: is scraped there; one on loopback only from the host itself (``address`` is then loopback)."""
    if not _TARGET_NAME.match(str(host or "")):
        raise MonitoringError("inventory host name %r cannot name a scrape target: use letters, digits, '.', '_', '-'"
                              % (host,))
    out = []
    for item in instances or []:
        if not isinstance(item, dict):
            raise MonitoringError("%s: an instance is %r, not a mapping: give sglang_service_instances items"
                                  % (host, item))
        spec = dict(defaults or {}, **item)
        name = str(spec.get("name") or "")
        if not _TARGET_NAME.match(name):
            raise MonitoringError("%s: instance name %r is missing or not a plain name" % (host, name))
        what = "%s/%s" % (host, name)
        listen = configured = str(spec.get("host") or "127.0.0.1")
        if _is_unspecified(listen):
            listen = address
        speculative = spec.get("speculative") or {}
        algorithm = str(speculative.get("algorithm") if isinstance(speculative, dict) else speculative or "none")
        floor = spec.get("min_accept_length")
        out.append({
            "host": str(host), "instance": name, "address": str(listen), "port": _port(spec.get("port"), what),
            "model": str(spec.get("served_model_name") or name),
            "speculative": algorithm.lower() not in ("", "none"),
            "min_accept_length": float(floor) if floor not in (None, "") else None,
            "listen": configured,  # as configured: the router's worker URL follows the drain step's rule from it
        })
    return out


def file_sd_groups(endpoints_by_host, monitoring_host, router=None, host_exporter_port=None,
                   default_min_accept_length=None):
    """The file_sd target files Prometheus reads: {"instances.json": [...], "router.json": [...],
    "hosts.json": [...]} (each a list of {"targets": [...], "labels": {...}}), sorted, one group per target.

    endpoints_by_host: {inventory host: (address, [instance_endpoints items]) }. A host without endpoints
    (None) was not in the play (a --limit): refused, since dropping it would delete its targets."""
    floor_default = float(default_min_accept_length if default_min_accept_length is not None
                          else RULES["min_accept_length"])
    instances, hosts = [], []
    for host in sorted(endpoints_by_host):
        entry = endpoints_by_host[host]
        if entry is None:
            raise MonitoringError("host %s has no scrape endpoints in this run (left out by --limit?): run the "
                                  "monitoring play over the whole inventory so its targets are kept" % host)
        address, endpoints = entry
        for ep in endpoints:
            # loopback is reachable from the monitoring host only on the host itself, or where the inventory
            # puts the hosts on loopback too (sandbox hosts sharing one network namespace)
            if _is_loopback(ep["address"]) and host != monitoring_host and not _is_loopback(address):
                raise MonitoringError(
                    "%s/%s listens on loopback (%s) only, so Prometheus on %s cannot scrape it: set the instance's "
                    "host (ct200_sglang_host) to an address of %s the monitoring host reaches, or 0.0.0.0"
                    % (host, ep["instance"], ep["address"], monitoring_host, host))
            labels = {"ct200_host": host, "ct200_instance": ep["instance"], "model": ep["model"],
                      "speculative": "true" if ep["speculative"] else "false"}
            if ep["speculative"]:
                floor = ep["min_accept_length"] if ep["min_accept_length"] is not None else floor_default
                labels["ct200_min_accept_length"] = _fmt(floor)
            instances.append({"targets": [_hostport(ep["address"], ep["port"])], "labels": labels})
        if host_exporter_port:
            hosts.append({"targets": [_hostport(address, _port(host_exporter_port, host))],
                          "labels": {"ct200_host": host}})
    routers = []
    if router:
        routers.append({"targets": [_hostport(router["address"], _port(router["port"], "router"))],
                        "labels": {"ct200_host": str(router["host"]), "ct200_instance": "router"}})
    return {"instances.json": instances, "router.json": routers, "hosts.json": hosts}


def _fmt(value):
    return ("%.3f" % float(value)).rstrip("0").rstrip(".")


def render_file_sd(groups):
    """One target file's text (stable: sorted keys, a trailing newline)."""
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def accept_floor_rules(instance_groups):
    """floors.rules.yml (JSON is YAML): one recording rule ct200:min_accept_length per speculative instance,
    its floor as the value, so CT200AcceptLengthLow compares each instance with its own floor."""
    rules = []
    for group in instance_groups:
        labels = group["labels"]
        if "ct200_min_accept_length" in labels:
            rules.append({"record": "ct200:min_accept_length", "expr": "vector(%s)" % labels["ct200_min_accept_length"],
                          "labels": {"ct200_host": labels["ct200_host"], "ct200_instance": labels["ct200_instance"]}})
    return json.dumps({"groups": [{"name": "ct200-accept-floors", "rules": rules}]},
                      indent=2, sort_keys=True) + "\n"


def monitoring_files(endpoints_by_host, monitoring_host, router=None, host_exporter_port=None,
                     default_min_accept_length=None):
    """{file name: text} of everything the monitoring role writes from the inventory: the three file_sd
    target files and floors.rules.yml."""
    groups = file_sd_groups(endpoints_by_host, monitoring_host, router, host_exporter_port, default_min_accept_length)
    files = {name: render_file_sd(value) for name, value in groups.items()}
    files["floors.rules.yml"] = accept_floor_rules(groups["instances.json"])
    return files


# ---------------------------------------------------------------------------------------------------------------
# Prometheus text format (the /metrics of SGLang and of the stand-in)
# ---------------------------------------------------------------------------------------------------------------

def _unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_exposition(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition; comments skipped; a malformed line
    raises MonitoringError naming it."""
    if len(text) > MAX_EXPOSITION_BYTES:
        raise MonitoringError("/metrics answer is over %d bytes: not a SGLang metrics page" % MAX_EXPOSITION_BYTES)
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise MonitoringError("/metrics line %d is not Prometheus text: %s" % (number, shorten(repr(line), 120)))
        labels, rest = {}, match.group(3) or ""
        while rest.strip():
            label = _LABEL.match(rest)
            if not label:
                raise MonitoringError("/metrics line %d has malformed labels: %s" % (number, shorten(repr(line), 120)))
            labels[label.group(1)] = _unescape(label.group(2))
            rest = rest[label.end():]
        try:
            value = float(match.group(4))
        except ValueError:
            raise MonitoringError("/metrics line %d has no number: %s" % (number, shorten(repr(line), 120)))
        samples.append((match.group(1), labels, value))
    return samples


def metric_value(samples, name, how="sum"):
    """One number for a metric over its series (sum, or max), None when absent."""
    values = [v for n, _labels, v in samples if n == name and not math.isnan(v)]
    if not values:
        return None
    return max(values) if how == "max" else sum(values)


# ---------------------------------------------------------------------------------------------------------------
# `ct200 status`: one row per instance, and the rules it breaks
# ---------------------------------------------------------------------------------------------------------------

def release_summary(state, records):
    """'r<id>' of the current release (with its target commit's 12 first hex), or '-' when none is recorded."""
    if not isinstance(state, dict) or not state.get("current"):
        return "-"
    current = str(state["current"])
    record = (records or {}).get(current) or {}
    commit = str(((record.get("target") or {}).get("commit")) or "")[:12]
    return "%s (%s)" % (current, commit) if commit else current


def instance_verdict(row, rules=None):
    """The rules an instance breaks: a list of short reasons ([] = fine). ``row`` keys: health ('ok'|...),
    speculative, accept_length, min_accept_length, token_usage, queue_reqs, token_state, in_rotation."""
    rules = dict(RULES, **(rules or {}))
    broken = []
    if row.get("health") != "ok":
        broken.append("health %s" % (row.get("health") or "unknown"))
    if row.get("speculative"):
        floor = row.get("min_accept_length")
        floor = float(floor if floor is not None else rules["min_accept_length"])
        accept = row.get("accept_length")
        if accept is not None and float(accept) < floor:
            broken.append("accept length %.2f < %.2f" % (float(accept), floor))
    usage = row.get("token_usage")
    if usage is not None and float(usage) > rules["max_token_usage"]:
        broken.append("KV use %.0f%% > %.0f%%" % (100 * float(usage), 100 * rules["max_token_usage"]))
    queue = row.get("queue_reqs")
    if queue is not None and float(queue) > rules["max_queue_reqs"]:
        broken.append("queue %d > %d" % (int(queue), rules["max_queue_reqs"]))
    if row.get("token_state") == "drift":
        broken.append("token drift")
    if row.get("in_rotation") is False and row.get("health") == "ok":
        broken.append("healthy but out of rotation")
    return broken


STATUS_COLUMNS = (("host", "HOST"), ("instance", "INSTANCE"), ("health", "HEALTH"), ("release", "RELEASE"),
                  ("accept_length", "ACCEPT(5m)"), ("decode_tok_s", "TOK/S"), ("queue_reqs", "QUEUE"),
                  ("token_usage", "KV"), ("token_state", "TOKEN"), ("in_rotation", "ROUTER"), ("verdict", "VERDICT"))


def _cell(key, value):
    if value is None or value == "":
        return "-"
    if key == "token_usage":
        return "%.0f%%" % (100 * float(value))
    if key == "accept_length":
        return "%.2f" % float(value)
    if key == "decode_tok_s":
        return "%.1f" % float(value)
    if key == "queue_reqs":
        return "%d" % int(value)
    if key == "in_rotation":
        return value if isinstance(value, str) else ("yes" if value else "no")
    if key == "verdict":
        return "ok" if not value else "; ".join(value)
    return str(value)


def status_table(rows):
    """The fixed-width table `ct200 status` prints (one line per instance)."""
    cells = [[title for _key, title in STATUS_COLUMNS]]
    cells += [[_cell(key, row.get(key)) for key, _title in STATUS_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(STATUS_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)


def _health(status):
    try:
        code = int(status)
    except (TypeError, ValueError):
        return "unreachable"
    if code == 200:
        return "ok"
    if code == 503:
        return "starting"
    return "unreachable" if code <= 0 else "http %d" % code


def token_state(fingerprint, expected):
    """in_sync / drift / missing of a host's token file against the inventory's token, '-' without either."""
    if not fingerprint or fingerprint == "none":
        return "missing"
    if not expected:
        return "-"
    return "in_sync" if fingerprint == expected else "drift"


def router_cell(traffic_report, host, endpoint):
    """What the ROUTER column says of one instance: True/False (the router's own worker list: registered and
    healthy, i.e. it sends the instance traffic), 'external' / 'none' (ct200_traffic: nothing of the project's
    routes it), or None when unknown (no router host, router unreachable: the report's router error says why).

    traffic_report: {"mode", "router": router_workers' result (its "workers") or None};
    host: the host's raw row ("traffic_address", "router_is_local"), as the drain step computes the worker URL."""
    if not isinstance(traffic_report, dict):
        return None
    mode = traffic_report.get("mode")
    if mode in ("external", "none"):
        return mode
    answer = traffic_report.get("router")
    if mode != "router" or not isinstance(answer, dict) or not isinstance(answer.get("workers"), list):
        return None
    try:
        url = traffic.worker_url(endpoint.get("listen"), host.get("traffic_address") or "", endpoint.get("port"),
                                 bool(host.get("router_is_local")))
    except traffic.TrafficError:
        return False  # the router cannot reach it there, so it sends it nothing (the drain step refuses it too)
    healthy = set()
    for worker in answer["workers"]:
        try:
            if isinstance(worker, dict) and worker.get("healthy") is True:
                healthy.add(traffic.normalize_url(worker.get("url")))
        except traffic.TrafficError:
            continue
    return url in healthy


def router_summary(traffic_report):
    """One line on the router for under the table, or None (mode none, or no report)."""
    if not isinstance(traffic_report, dict) or traffic_report.get("mode") in (None, "none"):
        return None
    mode = traffic_report["mode"]
    if mode == "external":
        return "ROUTER: ct200_traffic is external: the site's load balancer routes traffic (not asked)"
    answer = traffic_report.get("router")
    where = traffic_report.get("router_url") or "?"
    if not traffic_report.get("router_host"):
        return ("ROUTER: ct200_traffic is router but the inventory names no router host (ct200_router_host or group "
                "ct200_router): no rotation is known")
    if not isinstance(answer, dict) or not isinstance(answer.get("workers"), list):
        error = (answer or {}).get("msg") if isinstance(answer, dict) else None
        return "ROUTER %s on %s: no worker list (%s)" % (where, traffic_report["router_host"], error or "not asked")
    healthy = sum(1 for w in answer["workers"] if isinstance(w, dict) and w.get("healthy") is True)
    return "ROUTER %s on %s: %d worker(s) in rotation of %d listed" % (
        where, traffic_report["router_host"], healthy, len(answer["workers"]))


def status_rows(report, rules=None, in_rotation=None):
    """The rows of `ct200 status` from status.yml's raw report.

    report: {"expected_fingerprint": str|None, "prometheus": {"<host>/<instance>": accept_length} | None,
             "rotation": {"<host>/<instance>": bool} | None (the router's answer, traffic.rotation),
             "traffic": {"mode", "router_host", "router_url", "router": router_workers' result} | None (router_cell),
             "hosts": [{"host", "fingerprint", "release_state", "release_records", "instances": [
                 {"endpoint": instance_endpoints item, "health_status": int, "metrics": str|None,
                  "server_info": dict|None}]}]}
    in_rotation: callable(host, instance) -> bool|None (the router's answer), None: not known ('-')."""
    rows = []
    report = report or {}
    prom = report.get("prometheus")
    expected = report.get("expected_fingerprint")
    for host in sorted(report.get("hosts") or [], key=lambda h: str(h.get("host"))):
        for inst in host.get("instances") or []:
            ep = inst.get("endpoint") or {}
            row = {"host": host.get("host"), "instance": ep.get("instance"), "model": ep.get("model"),
                   "speculative": bool(ep.get("speculative")), "min_accept_length": ep.get("min_accept_length"),
                   "health": _health(inst.get("health_status")),
                   "release": release_summary(host.get("release_state"), host.get("release_records")),
                   "token_state": token_state(host.get("fingerprint"), expected), "in_rotation": None,
                   "accept_source": None, "metrics_error": None}
            samples = []
            if inst.get("metrics"):
                try:
                    samples = parse_exposition(inst["metrics"])
                except MonitoringError as exc:
                    row["metrics_error"] = str(exc)
            key = "%s/%s" % (row["host"], row["instance"])
            accept = None
            if prom is not None and key in prom and prom[key] is not None:
                accept, row["accept_source"] = float(prom[key]), "prometheus (5m)"
            if accept is None:
                accept = metric_value(samples, "sglang:spec_accept_length", "max")
                row["accept_source"] = "metrics" if accept is not None else None
            if accept is None:
                states = ((inst.get("server_info") or {}).get("internal_states") or [{}])
                value = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
                if value is not None:
                    accept, row["accept_source"] = float(value), "server_info"
            row["accept_length"] = accept if row["speculative"] else None
            row["decode_tok_s"] = metric_value(samples, "sglang:gen_throughput")
            row["queue_reqs"] = metric_value(samples, "sglang:num_queue_reqs")
            row["token_usage"] = metric_value(samples, "sglang:token_usage", "max")
            rotation = report.get("rotation")
            if isinstance(rotation, dict) and key in rotation:
                row["in_rotation"] = None if rotation[key] is None else bool(rotation[key])
            elif in_rotation is not None:
                row["in_rotation"] = in_rotation(row["host"], row["instance"])
            elif report.get("traffic") is not None:
                row["in_rotation"] = router_cell(report["traffic"], host, ep)
            row["verdict"] = instance_verdict(row, rules)
            rows.append(row)
    return rows


def prometheus_accept_lengths(answer):
    """{"<host>/<instance>": value} of a /api/v1/query answer for ct200:accept_length:avg5m."""
    out = {}
    if not isinstance(answer, dict) or answer.get("status") != "success":
        return out
    for item in (answer.get("data") or {}).get("result") or []:
        labels = item.get("metric") or {}
        try:
            out["%s/%s" % (labels["ct200_host"], labels["ct200_instance"])] = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out
