#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_repo_meta
short_description: Resolve Hugging Face revisions to commits (and list their trees) once, for a whole fleet
version_added: "0.1.0"
description:
  - Meant to run once per play on the controller (C(run_once), C(delegate_to=localhost)); the commits and
    listings it returns are handed to every host's M(ct200.deploy.hf_download) (O(ct200.deploy.hf_download#module:revision)
    and O(ct200.deploy.hf_download#module:listing)), so the Hub API calls of a run do not grow with the fleet.
  - A branch or tag costs one Hub API call per repository; a 40-hex commit costs none.
  - With O(list_tree), the recursive tree of each named repository at its commit is fetched (one call each) and
    every path and entry is checked like M(ct200.deploy.hf_download) checks the Hub's listing.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - huggingface_hub >= 2.4, < 2.5 on the controller (not imported when every revision is a commit and nothing is listed)
options:
  repos:
    description: Repositories to resolve.
    type: list
    elements: dict
    required: true
    suboptions:
      repo_id:
        description: Repository id, C(org/name).
        type: str
        required: true
      revision:
        description: Branch, tag or 40-hex commit.
        type: str
        default: main
      repo_type:
        description: Repository type.
        type: str
        choices: [model, dataset, space]
        default: model
  list_tree:
    description: The O(repos[].repo_id) whose tree is listed too (only those some host must download).
    type: list
    elements: str
    default: []
  token:
    description: Hugging Face access token. Never logged or returned.
    type: str
  endpoint:
    description: Hub endpoint. Defaults to C($HF_ENDPOINT), else U(https://huggingface.co).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Only reads from the Hub; the same in check mode.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
seealso:
  - module: ct200.deploy.hf_download
"""

EXAMPLES = r"""
- name: Controller | resolve every repository once for the fleet
  ct200.deploy.hf_repo_meta:
    repos:
      - {repo_id: moonshotai/Kimi-K2.6, revision: main}
      - {repo_id: z-lab/Kimi-K2.6-DFlash, revision: main}
    token: "{{ vault_hf_token }}"
  delegate_to: localhost
  run_once: true
  no_log: true
  register: meta
"""

RETURN = r"""
commits:
  description: repo_id -> the commit its revision resolved to.
  returned: success
  type: dict
listings:
  description: repo_id -> its tree at that commit, a list of C({path, size, oid, lfs}) (only repositories in O(list_tree)).
  returned: success
  type: dict
network_calls:
  description: Hub API calls made.
  returned: always
  type: int
code:
  description: On failure, the cause (hf_download's vocabulary).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import hf_transfer  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import TokenError, resolve_token  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_paths import url_credentials  # noqa: E402


def resolve_all(params, token):
    commits, listings, calls = {}, {}, 0
    for repo in params["repos"]:
        opts = hf_transfer.Options(repo_id=repo["repo_id"], revision=repo["revision"], repo_type=repo["repo_type"],
                                   local_dir="/nonexistent-hf_repo_meta", token=token, endpoint=params["endpoint"])
        opts.validate()
        commit, listing, used = hf_transfer.controller_meta(opts, repo["repo_id"] in params["list_tree"])
        calls += used
        commits[repo["repo_id"]] = commit
        if listing is not None:
            listings[repo["repo_id"]] = listing
    return commits, listings, calls


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repos=dict(type="list", elements="dict", required=True, options=dict(
                repo_id=dict(type="str", required=True),
                revision=dict(type="str", default="main"),
                repo_type=dict(type="str", choices=["model", "dataset", "space"], default="model"),
            )),
            list_tree=dict(type="list", elements="str", default=[]),
            token=dict(type="str", no_log=True),
            endpoint=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    for secret in url_credentials(module.params["endpoint"]):
        module.no_log_values.add(secret)
    try:
        token = resolve_token(module.params["token"]).token
        commits, listings, calls = resolve_all(module.params, token)
    except TokenError as exc:
        module.fail_json(msg="revisions not resolved: %s" % exc, code="bad_token", network_calls=0)
    except hf_transfer.DownloadError as exc:
        module.fail_json(msg=exc.operator_message(), code=exc.code)
    module.exit_json(changed=False, commits=commits, listings=listings, network_calls=calls)


if __name__ == "__main__":
    main()
