# SPDX-License-Identifier: Apache-2.0
"""`ct200`: the fleet command, ansible-runner driving the ct200.deploy playbooks.

It runs from a checkout of the collection or from a pip install beside an installed collection;
``ct200_fleet.locate`` says which and where (``COLLECTION``).
"""

from ct200_fleet.locate import locate

COLLECTION = locate()
