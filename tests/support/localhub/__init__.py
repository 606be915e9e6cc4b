# SPDX-License-Identifier: Apache-2.0
"""Local stand-in for the Hugging Face Hub (real HTTP, real client behaviour).

``from localhub import LocalHub``; see ``tests/support/localhub/README.md``.
"""

from .content import Generated, parse_size
from .faults import FaultError
from .hub import LocalHub
from .personas import PERSONAS, token_for
from .repos import (
    DRAFTER_REPO,
    KIMI_CLAIMED_TOTAL_SIZE,
    PRIVATE_REPO,
    TARGET_REPO,
    RepoSpec,
)

__all__ = [
    "DRAFTER_REPO",
    "KIMI_CLAIMED_TOTAL_SIZE",
    "PERSONAS",
    "PRIVATE_REPO",
    "TARGET_REPO",
    "FaultError",
    "Generated",
    "LocalHub",
    "RepoSpec",
    "parse_size",
    "token_for",
]
