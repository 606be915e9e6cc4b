#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: site_plan
short_description: The site's decisions (host order, seed, fan-out, bytes, failed checks, report) in one place
version_added: "0.2.0"
description:
  - "Action plugin (runs on the controller, contacts no host). The preflight (C(playbooks/preflight.yml)) and the
    weights role (C(ct200.deploy.model_weights)) call it at each point where the fleet decides something; the
    decisions are the tested functions of C(plugins/module_utils/site_plan.py), and no task decides again."
  - Per-host inputs are read from each host's variables, named by O(host_vars) (C(name) or C(name.key)), so a
    registered result of every host reaches the plan without a Jinja loop.
  - "O(stage=token): is the inventory's token usable (cause and fix when not) and its fingerprint (never the token)."
  - "O(stage=fetch): per host the repositories it lacks (offline manifest probe), whether it holds the inventory token,
    where its fit check reads configs; the fleet's fetch list, the trees to list and whether access must be proven."
  - "O(stage=hub): the commits, listings, fetch list and access verdict the later plays read (register it as C(ct200_hub))."
  - "O(stage=host_plan): from one host's download plan, the bytes each repository still needs (requirements for
    M(ct200.deploy.disk_space)), the repositories planned and to download, one line per repository."
  - "O(stage=known_plan): the preflight's offline probe of this host as its weights plan when the site fetches nothing
    (O(fetch) empty) and the probe covers exactly O(repos) at their commits, verified as O(verify) would; else null."
  - "O(stage=report): host order (inventory order) and seed, the fan-out decision, per host its source, bytes to fetch
    and failed checks with cause and fix; the rows, the table, the JSON text and the failure message."
  - "O(stage=site): the layout (host order, fan-out, seed, degree; O(layout) when one was decided already),
    whether this run fans out (O(fetch)), each host's address and its peers per repository."
  - "O(stage=jobs): the async jobs this host started, with the label and progress file M(ct200.deploy.hf_download_wait) reads."
  - "O(stage=outcome): one line per repository (complete, fetched, or failed with the cause), the failures, the commits."
  - "O(stage=fanout_result): this host's fan-out outcome as the fact C(ct200_fanout) that C(ct200 deploy) summarizes."
author: ct200-deploy developers (@ct200-deploy)
options:
  stage:
    description: Which decision to make (see the description).
    type: str
    required: true
    choices: [site, token, fetch, hub, host_plan, known_plan, staged, report, jobs, outcome, fanout_result]
  token:
    description: O(stage=token). The inventory's Hub token; only its fingerprint is returned. Never logged.
    type: str
  vault_defined:
    description: O(stage=token). Whether C(vault_hf_token) is defined (an undefined one names the vault in the cause).
    type: bool
    default: true
  inventory_dir:
    description: O(stage=token). The inventory directory, named in the cause of a missing vault.
    type: str
  repos:
    description:
      - O(stage=fetch), O(stage=hub). Repository ids, in the deployment's order.
      - O(stage=site), O(stage=fanout_result), O(stage=staged). Repositories as C({name, repo_id, local_dir}) (local_dir
        the repository's root).
      - O(stage=known_plan). The weights role's repositories (C(revision) the resolved commit).
    type: list
    elements: raw
  hosts:
    description:
      - O(stage=fetch). The hosts of the play.
      - O(stage=report), O(stage=site). The hosts selected (C(--limit)); the plan keeps O(group)'s order.
    type: list
    elements: str
  group:
    description: O(stage=report), O(stage=site). The inventory group in inventory order (the seed is chosen by it).
    type: list
    elements: str
  host_vars:
    description:
      - Plan input -> the variable (C(name) or C(name.key)) read from each host's variables.
      - "O(stage=fetch): C(probe), C(token_query), C(models_dir) (each host's own weights directory; a host
        without the variable gets O(models_dir)). O(stage=report): C(site), C(runtime), C(token), C(token_query),
        C(hub), C(plan), C(disk), C(fit), C(fetch_plan) (the registered O(stage=fetch) result: whose configs each
        fit check read), C(configs) (each host's registered config fetch: a peer's row names the seed's failure).
        O(stage=site): C(address) (a list: the first set), C(port)."
    type: dict
  host_checks:
    description:
      - O(stage=report). Variables of each host holding a list of check results C({check, ok, value, cause, fix})
        (C(ok) absent means failed), from any fact source; every failed one becomes a row's failed check.
    type: list
    elements: str
  done:
    description: O(stage=report). A variable every host that finished its preflight has; a host without it is unreachable.
    type: str
    default: ct200_preflight_fit
  fingerprint:
    description: O(stage=fetch). The inventory token's fingerprint (from O(stage=token)).
    type: str
  commits:
    description: O(stage=fetch). Repository id -> resolved commit.
    type: dict
  models_dir:
    description: O(stage=fetch). Where the weights live on a host whose O(host_vars) C(models_dir) variable is unset.
    type: str
  resolved:
    description: O(stage=hub). The registered result of M(ct200.deploy.hf_repo_meta) resolving the revisions.
    type: dict
  access:
    description: O(stage=hub). The registered result of M(ct200.deploy.hf_gated_access) (skipped when not needed).
    type: dict
  listed:
    description: O(stage=hub). The registered result of M(ct200.deploy.hf_repo_meta) listing the trees.
    type: dict
  fetch:
    description:
      - O(stage=hub). The fleet's fetch list (from O(stage=fetch)).
      - O(stage=site). Repository ids some host lacks; empty, the run does not fan out; unset, unknown.
      - O(stage=known_plan). The same; only an empty list lets the preflight's probe stand as the plan.
    type: list
    elements: str
  token_problem:
    description: O(stage=hub). The token's problem (from O(stage=token)), or null.
    type: str
  plan:
    description:
      - O(stage=host_plan). A host's registered loop of M(ct200.deploy.hf_download) in check mode.
      - O(stage=known_plan). The preflight's offline probe of this host (the same kind of loop).
    type: dict
  enabled:
    description: O(stage=site). Fan out; unset, on when O(group) has more than one host.
    type: raw
  seed:
    description: O(stage=site). The seed; unset, the first host in inventory order. It must be a host of the run.
    type: str
  degree:
    description: O(stage=site). Children per host in the fan-out tree (1 = chain).
    type: raw
    default: 2
  layout:
    description:
      - O(stage=site), O(stage=report). A layout decided already (the preflight's); only checked against the hosts.
      - O(stage=fetch). The site's layout; with fan-out only the config fetcher (the seed) fetches config files.
      - O(stage=jobs), O(stage=fanout_result). The layout of this run.
    type: dict
  plans:
    description: O(stage=outcome), O(stage=staged). This host's plan results (C(hf_download) check mode), in repository order.
    type: list
    elements: dict
  listings:
    description: O(stage=outcome), O(stage=staged). The seed's listing results (C(hf_fanout_fetch mode=list)), in repository order.
    type: list
    elements: dict
  started:
    description: O(stage=jobs), O(stage=outcome). The registered async loops of this host (one result per repository each).
    type: list
    elements: dict
  finished:
    description: O(stage=outcome), O(stage=fanout_result). The final job results (C(hf_download_wait)'s C(jobs)).
    type: list
    elements: dict
  port:
    description: O(stage=site). The weight server port of a host whose O(host_vars) C(port) variable is unset.
    type: int
    default: 8790
  dirs:
    description: O(stage=jobs). Repository name -> the directory its job writes (its snapshot), for the progress file.
    type: dict
  verify:
    description: O(stage=known_plan). The role's verify level; the probe stands only for C(sha256) or C(full) (it verified by sha256).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  check_mode:
    support: full
    details: It reads and decides only; check mode changes nothing.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
  bypass_host_loop:
    support: none
"""

EXAMPLES = r"""
- name: The fleet report
  ct200.deploy.site_plan:
    stage: report
    group: "{{ groups['ct200'] }}"
    hosts: "{{ query('ansible.builtin.inventory_hostnames', ansible_limit | default('ct200')) }}"
    host_vars: {site: ct200_site.layout, runtime: sglang_runtime_preflight, hub: ct200_hub, plan: ct200_preflight_plan}
    host_checks: [sglang_runtime_preflight.failed_checks]
  register: plan

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ plan.table }}"
"""

RETURN = r"""
problem:
  description: O(stage=token). Why the token is unusable, or null.
  returned: stage=token
  type: str
fingerprint:
  description: O(stage=token). C(sha256:) and 12 hex digits of the token, or null.
  returned: stage=token
  type: str
hosts:
  description:
    - O(stage=fetch). Per host C(incomplete) (repository ids), C(token_in_place), C(config_fetch) (the repositories whose
      config files it fetches for the fit check), C(fit_host) (where its fit check runs) and C(config_dirs) (repository id
      -> the snapshot the fit check reads, on C(fit_host)).
  returned: stage=fetch
  type: dict
config_fetcher:
  description: O(stage=fetch). The one host that fetches config files when the site fans out (the seed), else null.
  returned: stage=fetch
  type: str
fetch:
  description: O(stage=fetch), O(stage=hub). Repository ids some host must fetch, in repository order.
  returned: stage=fetch or stage=hub
  type: list
  elements: str
prove_access:
  description: O(stage=fetch). Whether the controller must prove access.
  returned: stage=fetch
  type: bool
list_repos:
  description: O(stage=fetch). C({repo_id, revision}) of the trees to list.
  returned: stage=fetch
  type: list
  elements: dict
commits:
  description: O(stage=hub), O(stage=report) repository id -> commit; O(stage=outcome), O(stage=staged) repository name -> commit.
  returned: stage=hub or stage=report or stage=outcome or stage=staged
  type: dict
listings:
  description: O(stage=hub). Repository id -> tree of the commit.
  returned: stage=hub
  type: dict
access:
  description: O(stage=hub). The access verdict (C(not_needed) when nothing is fetched).
  returned: stage=hub
  type: dict
plan_ready:
  description: O(stage=hub). Whether access is proven, so the hosts may plan their downloads.
  returned: stage=hub
  type: bool
plan:
  description: O(stage=known_plan). The probe as the plan (C(results) in O(repos) order, C(reused)), or null.
  returned: stage=known_plan
  type: dict
requirements:
  description: O(stage=host_plan). C({label, path, bytes}) per planned repository.
  returned: stage=host_plan
  type: list
  elements: dict
planned:
  description: O(stage=host_plan). Repository ids planned (a commit in the result).
  returned: stage=host_plan
  type: list
  elements: str
rows:
  description: O(stage=report). One row per host (unreachable hosts included) with C(fetch_from), C(hub_bytes), C(peer_bytes).
  returned: stage=report
  type: list
  elements: dict
site:
  description: O(stage=report). C({fanout, seed, hub_bytes, peer_bytes}).
  returned: stage=report
  type: dict
table:
  description: O(stage=report). The table lines.
  returned: stage=report
  type: list
  elements: str
site_line:
  description: O(stage=report). Where the site's bytes come from, in one line.
  returned: stage=report
  type: str
json:
  description: O(stage=report). The report C({hosts, site, ok}) as JSON text.
  returned: stage=report
  type: str
ok:
  description: O(stage=report). No host has a failed check.
  returned: stage=report
  type: bool
failure:
  description: O(stage=report). Every failed check per host with cause and fix, or null.
  returned: stage=report
  type: str
layout:
  description: O(stage=report), O(stage=site). C({hosts, fanout, seed, degree}).
  returned: stage=report or stage=site
  type: dict
peers:
  description: O(stage=site). Repository name -> C({name, url}) of every host's weight server.
  returned: stage=site
  type: dict
fan_out:
  description: O(stage=site). Whether this run fans out (the layout says so and something is to be fetched).
  returned: stage=site
  type: bool
seed:
  description: O(stage=site). The seed, or null.
  returned: stage=site
  type: str
addresses:
  description: O(stage=site). Host -> the address its weight server listens on (fan-out).
  returned: stage=site
  type: dict
models:
  description: O(stage=site), O(stage=staged). C({name, path}) of the directories a weight server serves (staged, the snapshots).
  returned: stage=site or stage=staged
  type: list
  elements: dict
repos:
  description: O(stage=staged). The repositories with C(local_dir) their snapshot of this run's commit, C(root_dir) the root.
  returned: stage=staged
  type: list
  elements: dict
dirs:
  description: O(stage=staged). Repository name -> its snapshot directory C(<root>/snapshots/<commit>) (model_weights_dirs).
  returned: stage=staged
  type: dict
create_dirs:
  description: O(stage=staged). Each repository's root, its C(snapshots/) and the snapshot, to create owned by the download user.
  returned: stage=staged
  type: list
  elements: str
to_download:
  description: O(stage=host_plan). Names of the repositories with files to download.
  returned: stage=host_plan
  type: list
  elements: str
lines:
  description: O(stage=host_plan), O(stage=outcome). One line per repository.
  returned: stage=host_plan or stage=outcome
  type: list
  elements: str
jobs:
  description: O(stage=jobs). C({jid, label, progress_file}) per started job.
  returned: stage=jobs
  type: list
  elements: dict
failures:
  description: O(stage=outcome). One line per repository that did not complete.
  returned: stage=outcome
  type: list
  elements: str
ansible_facts:
  description: O(stage=fanout_result). C(ct200_fanout) with C(seed), C(role), C(repos), C(verified).
  returned: stage=fanout_result
  type: dict
"""

from ansible_collections.ct200.deploy.plugins.module_utils.action_stub import fail_on_host  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.site_plan import ARGUMENT_SPEC  # noqa: E402


def main():
    fail_on_host("site_plan", ARGUMENT_SPEC, supports_check_mode=True)


if __name__ == "__main__":
    main()
