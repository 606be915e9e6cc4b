# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Filters of the router role; the decisions live in module_utils/traffic.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.ct200.deploy.plugins.module_utils.traffic import TrafficError
from ansible_collections.ct200.deploy.plugins.module_utils.traffic import router_argv as _router_argv
from ansible_collections.ct200.deploy.plugins.module_utils.traffic import worker_url as _worker_url

KEYS = ("listen", "port", "prometheus_port", "policy", "health_check_endpoint", "health_check_interval",
        "health_failure_threshold", "request_timeout", "shutdown_grace", "extra")
INTS = ("port", "prometheus_port", "health_check_interval", "health_failure_threshold", "request_timeout", "shutdown_grace")


def router_argv(settings):
    """sglang-router's flags (no workers, no secret) for the launcher's config file, from the role's settings."""
    if not isinstance(settings, dict) or set(settings) - set(KEYS):
        raise AnsibleFilterError("router_argv takes a dict with the keys %s" % ", ".join(KEYS))
    kwargs = dict(settings)
    try:
        for key in INTS:
            if key in kwargs:
                kwargs[key] = int(kwargs[key])
        return _router_argv(**kwargs)
    except (TrafficError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(str(exc)) from None


def traffic_worker_url(port, listen="127.0.0.1", address="", router_is_local=False):
    """The URL the router reaches an instance at (the drain step's own rule)."""
    try:
        return _worker_url(listen, address, port, bool(router_is_local))
    except TrafficError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule(object):
    def filters(self):
        return {"router_argv": router_argv, "traffic_worker_url": traffic_worker_url}
