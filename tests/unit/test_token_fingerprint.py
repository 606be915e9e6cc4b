# SPDX-License-Identifier: Apache-2.0
"""One token fingerprint: hf_auth.fingerprint. Playbooks call it through the
ct200.deploy.token_fingerprint filter (controller) or hf_token state=query (hosts); no playbook,
role or fleet command hashes a token itself (it was computed in four places, one of them inline
Python in playbooks/status.yml)."""

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.ct200.deploy.plugins.filter.token_fingerprint import FilterModule
from ansible_collections.ct200.deploy.plugins.module_utils.hf_auth import fingerprint

REPO = Path(__file__).resolve().parents[2]
FILTER = FilterModule().filters()["token_fingerprint"]


def test_the_filter_is_hf_auth_fingerprint_of_the_normalised_token():
    token = "hf_" + "a" * 34
    assert FILTER(token) == fingerprint(token) == FILTER("  %s\n" % token)
    assert re.fullmatch(r"sha256:[0-9a-f]{12}", FILTER(token))


@pytest.mark.parametrize("bad", ["", "  \n", None, 42])
def test_the_filter_refuses_no_token(bad):
    with pytest.raises(AnsibleFilterError, match="non-empty token"):
        FILTER(bad)


def test_no_playbook_role_or_fleet_command_hashes_a_token_itself():
    sources = [p for d in ("playbooks", "roles", "ct200_fleet") for p in (REPO / d).rglob("*")
               if p.suffix in (".yml", ".yaml", ".py", ".j2") and p.is_file()]
    sources += [REPO / "deploy_kimi.yml", REPO / "rotate_hf_token.yml"]
    own_hashing = re.compile(r"hash\(\s*['\"]sha256|hashlib")
    offenders = [str(p.relative_to(REPO)) for p in sources if own_hashing.search(p.read_text())]
    assert offenders == [], "use hf_auth.fingerprint (filter ct200.deploy.token_fingerprint or hf_token state=query)"
