# SPDX-License-Identifier: Apache-2.0
"""Shared test setup: the repository is the collection ct200.deploy (see docs/architecture.md)."""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO_ROOT, "collections")
# Test-only collections (ct200.sandbox: the nsenter connection) live apart from the product.
SUPPORT_COLLECTIONS = os.path.join(REPO_ROOT, "tests", "support", "collections")
for _path in (SUPPORT_COLLECTIONS, COLLECTIONS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
# Test infrastructure (the local Hub package `localhub`, netlab) lives in tests/support, apart from
# the product. First on the path, for pytest and for every subprocess it starts (python -m localhub),
# so a checkout tests its own copy, not the one an editable install of another checkout points at.
SUPPORT = os.path.join(REPO_ROOT, "tests", "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SUPPORT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != SUPPORT])
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(REPO_ROOT, "ansible.cfg"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory):
    """The project's local Hub with its default repos (Kimi-shaped target, gated drafter, private repo)."""
    from localhub import LocalHub
    with LocalHub(tmp_path_factory.mktemp("local-hub")) as hub:
        yield hub
