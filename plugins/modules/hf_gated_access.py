#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_gated_access
short_description: Prove, repo by repo, that a Hugging Face token can read every repository a deployment needs
version_added: "0.1.0"
description:
  - Resolves the token the way huggingface_hub 2.4 does for the user the module runs as (explicit O(token),
    then C(HF_TOKEN), C(HUGGING_FACE_HUB_TOKEN), then the token file), or for O(token_user).
  - Calls C(whoami-v2) once, then for every repository reads its public metadata (gated mode, commit),
    proves access with the Hub's C(auth-check) endpoint using exactly that token, and sums the sizes of the
    selected files from the recursive tree listing.
  - Access is never inferred from a public repository or from files already on disk. A file with no size in
    the listing is an error, never counted as 0.
  - Fails when any required repository is not accessible, listing every such repository with its cause and
    fix in one message.
author: ct200-deploy developers (@ct200-deploy)
requirements:
  - huggingface_hub >= 2.4, < 2.5 on the host that runs the module
options:
  repos:
    description:
      - Repositories to check. An empty list checks only the token (C(whoami)); the module then fails
        (with O(fail_on_denied)) when there is no valid token.
    type: list
    elements: dict
    required: true
    suboptions:
      repo_id:
        description: C(owner/name).
        type: str
        required: true
      revision:
        description: Branch, tag or commit. Defaults to the default branch.
        type: str
      repo_type:
        description: Repository type.
        type: str
        choices: [model, dataset, space]
        default: model
      allow_patterns:
        description: fnmatch patterns of the files that will be downloaded (huggingface_hub semantics).
        type: list
        elements: str
      ignore_patterns:
        description: fnmatch patterns of files to leave out.
        type: list
        elements: str
      required:
        description: Whether the module fails when this repository is not accessible.
        type: bool
        default: true
  token:
    description:
      - Token to check. When omitted, the token the running user (or O(token_user)) would use is resolved.
      - An empty or malformed token is an error; it is never sent.
    type: str
  token_user:
    description:
      - Resolve the token of this OS user (their C(~/.cache/huggingface/token)) instead of the running user's.
    type: str
  endpoint:
    description: Hub endpoint. Defaults to C($HF_ENDPOINT), else U(https://huggingface.co).
    type: str
  fail_on_denied:
    description: Fail when a required repository is not accessible. With C(false), only report.
    type: bool
    default: true
  proven:
    description:
      - The registered result of this module run once on the controller (C(run_once), C(delegate_to=localhost))
        with the token the hosts will use. When the token this host resolves has the same fingerprint and every
        repository in O(repos) was checked there (same revision and patterns), its verdicts are returned
        without any Hub call, so a fleet of N hosts costs the Hub one check, not N.
      - Anything that does not match is checked against the Hub as usual (see O(on_unproven)).
    type: dict
  on_unproven:
    description:
      - With O(proven) set and not applicable to this host, C(check) asks the Hub; C(fail) fails without a Hub
        call (the host does not hold the token the controller proved).
    type: str
    choices: [check, fail]
    default: check
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs the same checks in check mode.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
seealso:
  - module: ct200.deploy.hf_token
notes:
  - C(access) is one of C(public), C(granted), C(no_token), C(not_requested), C(pending),
    C(token_lacks_gated_scope), C(invalid_token), C(not_found).
"""

EXAMPLES = r"""
- name: Prove the token of the download user can read the target and the gated drafter
  ct200.deploy.hf_gated_access:
    token_user: sglang
    repos:
      - repo_id: moonshotai/Kimi-K2.6
      - repo_id: z-lab/Kimi-K2.6-DFlash
  register: access

- name: Check once on the controller, hand the verdicts to every host
  ct200.deploy.hf_gated_access:
    token: "{{ vault_hf_token }}"
    repos: [{repo_id: z-lab/Kimi-K2.6-DFlash}]
    fail_on_denied: false
  delegate_to: localhost
  run_once: true
  no_log: true
  register: controller_access

- name: Prove the host's token file is the proven token (no Hub call when it is)
  ct200.deploy.hf_gated_access:
    token_user: sglang
    repos: [{repo_id: z-lab/Kimi-K2.6-DFlash}]
    proven: "{{ controller_access }}"

- name: Check an explicit token (from a vault) once, on the controller
  ct200.deploy.hf_gated_access:
    token: "{{ vault_hf_token_next }}"
    repos:
      - {repo_id: z-lab/Kimi-K2.6-DFlash, allow_patterns: ["*.json", "*.safetensors"]}
  delegate_to: localhost
  run_once: true
  no_log: true
"""

RETURN = r"""
auth:
  description: Who the token belongs to, or why there is none.
  returned: always
  type: dict
  contains:
    status: {description: "ok, none (no token), invalid (rejected by the Hub) or error.", type: str}
    user: {description: Hub user name from whoami., type: str}
    token_role: {description: "read, write or fineGrained.", type: str}
    token_name: {description: The token's display name., type: str}
    can_read_gated_repos: {description: "For fine-grained tokens, the gated-repos read permission.", type: bool}
    fingerprint: {description: "sha256: + 12 hex digits of the token, never the token.", type: str}
    source: {description: "Where the token came from: explicit, env:HF_TOKEN, file:PATH.", type: str}
    message: {description: Human-readable summary., type: str}
    proven_on: {description: "C(controller) when the verdicts were reused from O(proven).", type: str}
repos:
  description: One entry per repository, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    repo_id: {description: The repository., type: str}
    gated: {description: "false, auto or manual.", type: raw}
    private: {description: Whether the repository is private., type: bool}
    commit: {description: Commit the revision resolves to., type: str}
    access: {description: The access verdict (see notes)., type: str}
    accessible: {description: Whether the token can read the content and its size is known., type: bool}
    bytes: {description: Sum of the sizes of the selected files (never 0 for unknown sizes)., type: int}
    files: {description: Number of selected files., type: int}
    message: {description: What was found., type: str}
    fix: {description: What the operator must do when not accessible., type: str}
summary:
  description: One human-readable line for the token and one per repository (verdict, size, fix).
  returned: always
  type: list
  elements: str
msg:
  description: Summary; when repositories are denied, every one with its cause and fix.
  returned: always
  type: str
total_bytes:
  description: Sum of C(bytes) over accessible repositories.
  returned: always
  type: int
denied:
  description: repo_ids of required repositories that are not accessible.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.ct200.deploy.plugins.module_utils import gated_access, hf_hub  # noqa: E402
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import TokenError, resolve_token  # noqa: E402


def _check(module, repos, resolved, result):
    """(auth, results, denied): the controller's verdicts when they apply, else the Hub's."""
    p = module.params
    reused = gated_access.reuse_proven(p["proven"], repos, resolved)
    if reused:
        auth, results = reused
        return auth, results, [r for r in results if r["required"] and not r["accessible"]]
    if p["proven"] is not None and p["on_unproven"] == "fail":
        proven_fp = (p["proven"].get("auth") or {}).get("fingerprint")
        module.fail_json(msg="the token this host resolves (%s, from %s) is not the one proven on the controller "
                             "(%s); no Hub call was made. Fix: install the proven token on this host (hf_token), "
                             "or remove the HF_TOKEN/HF_TOKEN_PATH that overrides it"
                             % (resolved.fingerprint, resolved.source, proven_fp), **result)
    endpoint = hf_hub.configure(p["endpoint"])
    return gated_access.check_access(hf_hub.api(endpoint), repos, resolved, endpoint)


def run(module):
    p = module.params
    result = dict(changed=False, auth={}, repos=[], total_bytes=0, denied=[], summary=[])
    try:
        repos = gated_access.normalise_repos(p["repos"], allow_empty=True)
        resolved = resolve_token(p["token"], p["token_user"])
    except (TokenError, gated_access.RepoSpecError) as exc:
        module.fail_json(msg="access not checked: %s" % exc, **result)
    auth, results, denied = _check(module, repos, resolved, result)
    result.update(auth=auth, repos=results, denied=[r["repo_id"] for r in denied],
                  summary=gated_access.summary_lines(auth, results),
                  total_bytes=sum(r["bytes"] or 0 for r in results if r["accessible"]))
    if denied:
        result["msg"] = gated_access.failure_message(denied, sum(1 for r in repos if r["required"]), auth)
        if p["fail_on_denied"]:
            module.fail_json(**result)
    elif auth.get("status") == "ok" or repos:
        result["msg"] = "all %d required repositories are accessible" % sum(1 for r in repos if r["required"])
    else:
        result["msg"] = "token not usable: %s" % auth.get("message")
        if p["fail_on_denied"]:
            module.fail_json(**result)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repos=dict(type="list", elements="dict", required=True, options=dict(
                repo_id=dict(type="str", required=True),
                revision=dict(type="str"),
                repo_type=dict(type="str", choices=["model", "dataset", "space"], default="model"),
                allow_patterns=dict(type="list", elements="str"),
                ignore_patterns=dict(type="list", elements="str"),
                required=dict(type="bool", default=True),
            )),
            token=dict(type="str", no_log=True),
            token_user=dict(type="str", no_log=False),  # a user name, not a secret
            endpoint=dict(type="str"),
            fail_on_denied=dict(type="bool", default=True),
            proven=dict(type="dict"),
            on_unproven=dict(type="str", choices=["check", "fail"], default="check"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
