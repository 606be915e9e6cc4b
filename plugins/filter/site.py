# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Filter of playbooks/vars/kimi_instance.yml; the decision lives in module_utils/site_plan.py."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import instance_dir


def instance_weights_dir(staged_dirs, name, models_dir, repo_id, commits=None):
    """The directory an instance serves for repository ``name`` (model_weights_dirs, else the resolved snapshot)."""
    return instance_dir(staged_dirs, name, models_dir, repo_id, commits)


class FilterModule(object):
    def filters(self):
        return {"instance_weights_dir": instance_weights_dir}
