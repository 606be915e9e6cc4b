"""Shared test setup: the repository is the collection ct200.deploy (see docs/architecture.md)."""

import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO_ROOT, "collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("ANSIBLE_CONFIG", os.path.join(REPO_ROOT, "ansible.cfg"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory):
    """The project's local Hub with its default repos (Kimi-shaped target, gated drafter, private repo)."""
    from localhub import LocalHub
    with LocalHub(tmp_path_factory.mktemp("local-hub")) as hub:
        yield hub
