# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Scrape targets and acceptance floors from the inventory, for the monitoring role: the one implementation
is plugins/module_utils/monitoring.py (tested there); these filters only hand it the play's data."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.ct200.deploy.plugins.module_utils import monitoring


def monitoring_endpoints(instances, host, address, defaults=None):
    """One host's scrape endpoints (its sglang_service_instances, defaults merged under each)."""
    try:
        return monitoring.instance_endpoints(host, address, instances, defaults)
    except monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc))


def monitoring_files(hosts, hostvars, monitoring_host, router=None, host_exporter_port=None,
                     min_accept_length=None):
    """{file name: text} of the target files and floors.rules.yml, from each host's monitoring_endpoints fact."""
    by_host = {}
    for host in hosts:
        facts = hostvars[host]
        endpoints = facts.get("ct200_monitoring_endpoints")
        # hosts that share one network namespace (the sandbox's nsenter hosts: ct200_traffic_shared_loopback, as the
        # drain steps read it) reach each other's loopback: their address for the loopback rule is loopback
        shared = str(facts.get("ct200_traffic_shared_loopback") or "").lower() in ("true", "yes", "1")
        address = "127.0.0.1" if shared else str(facts.get("ansible_host") or host)
        by_host[str(host)] = None if endpoints is None else (address, list(endpoints))
    try:
        return monitoring.monitoring_files(by_host, str(monitoring_host), router or None,
                                           host_exporter_port or None, min_accept_length)
    except monitoring.MonitoringError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"monitoring_endpoints": monitoring_endpoints, "monitoring_files": monitoring_files}
