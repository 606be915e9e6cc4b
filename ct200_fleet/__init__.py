# SPDX-License-Identifier: Apache-2.0
"""`ct200`: the fleet command, ansible-runner driving the ct200.deploy playbooks.

The package runs from a checkout of the collection (the repository root is its parent
directory): the playbooks, ansible.cfg and the collection symlink live there.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTIONS = REPO / "collections"

# The collection's one file writer (_io.atomic_write) is shared with the CLI.
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
