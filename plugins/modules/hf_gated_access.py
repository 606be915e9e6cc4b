#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# Apache-2.0

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
    description: Repositories to check.
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


def run(module):
    p = module.params
    result = dict(changed=False, auth={}, repos=[], total_bytes=0, denied=[], summary=[])
    try:
        repos = gated_access.normalise_repos(p["repos"])
        resolved = resolve_token(p["token"], p["token_user"])
    except (TokenError, gated_access.RepoSpecError) as exc:
        module.fail_json(msg="access not checked: %s" % exc, **result)
    endpoint = hf_hub.configure(p["endpoint"])
    auth, results, denied = gated_access.check_access(hf_hub.api(endpoint), repos, resolved, endpoint)
    result.update(auth=auth, repos=results, denied=[r["repo_id"] for r in denied],
                  summary=gated_access.summary_lines(auth, results),
                  total_bytes=sum(r["bytes"] or 0 for r in results if r["accessible"]))
    if denied:
        result["msg"] = gated_access.failure_message(denied, sum(1 for r in repos if r["required"]), auth)
        if p["fail_on_denied"]:
            module.fail_json(**result)
    else:
        result["msg"] = "all %d required repositories are accessible" % sum(1 for r in repos if r["required"])
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
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
