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
