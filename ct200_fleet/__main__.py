# SPDX-License-Identifier: Apache-2.0
"""python -m ct200_fleet == the `ct200` console script."""

import sys

from ct200_fleet.cli import main

sys.exit(main())
