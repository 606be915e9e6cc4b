# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Filters of playbooks/vars/kimi_instance.yml and preflight.yml; the decisions live in module_utils/site_plan.py."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import fit_ready, instance_dir


def instance_weights_dir(staged_dirs, name, models_dir, repo_id, commits=None):
    """The directory an instance serves for repository ``name`` (model_weights_dirs, else the resolved snapshot)."""
    return instance_dir(staged_dirs, name, models_dir, repo_id, commits)


def preflight_fit_ready(commits, repos, configs, config_fetch):
    """Whether the preflight's fit check of a host can run (every commit resolved, the fit host's configs fetched)."""
    return fit_ready(commits, repos, configs, config_fetch)


class FilterModule(object):
    def filters(self):
        return {"instance_weights_dir": instance_weights_dir, "preflight_fit_ready": preflight_fit_ready}
