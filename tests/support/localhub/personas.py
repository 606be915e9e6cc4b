# SPDX-License-Identifier: Apache-2.0
"""Test personas of the local Hub.

Tokens are *derived at run time* from the persona name (``hf_`` + 34 base62
characters of ``sha256("ct200-localhub:" + name)``), so no token literal is ever
written to a file.  Every process (server, tests, Ansible modules on sandbox
hosts) derives the same token for the same persona.

The ``invalid`` persona has a well-formed token that the Hub does not know:
every request carrying it gets ``401 Invalid credentials in Authorization header``
without ``X-Error-Code``, like a revoked token on the real Hub.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_TOKEN_SALT = "ct200-localhub:"
TOKEN_BODY_LENGTH = 34

#: organisation the ``granted*`` personas belong to; it owns ``ct200/private-model``.
ORG = "ct200"


@dataclass(frozen=True)
class Persona:
    """One test identity.

    ``role`` is the token role reported by ``whoami`` (``read``, ``write`` or
    ``fineGrained``).  ``can_read_gated`` is the fine-grained scope "Read access
    to contents of all public gated repos you can access" (always true for
    read/write tokens).  ``gated_status`` is this user's access-request status on
    gated repos unless a repo overrides it (``accepted``, ``pending`` or ``None``
    for never requested).  ``orgs`` lists organisations the user is a member of
    (members can read the organisation's private repos).
    """

    name: str
    username: str
    role: str
    description: str
    can_read_gated: bool = True
    gated_status: str | None = "accepted"
    orgs: tuple[str, ...] = field(default_factory=tuple)
    valid: bool = True

    @property
    def token(self) -> str:
        return token_for(self.name)

    @property
    def fine_grained(self) -> bool:
        return self.role == "fineGrained"


PERSONAS: dict[str, Persona] = {
    p.name: p
    for p in (
        Persona(
            "granted",
            "ct200-granted",
            "read",
            "read token; access to the gated drafter granted; member of org ct200",
            orgs=(ORG,),
        ),
        Persona(
            "granted_write",
            "ct200-granted-write",
            "write",
            "write token; access to the gated drafter granted; member of org ct200",
            orgs=(ORG,),
        ),
        Persona(
            "granted_fine_grained",
            "ct200-granted-fg",
            "fineGrained",
            "fine-grained token with canReadGatedRepos=true; access granted; member of org ct200",
            orgs=(ORG,),
        ),
        Persona(
            "never_requested",
            "ct200-never-requested",
            "read",
            "read token; never asked for access to the gated drafter",
            gated_status=None,
        ),
        Persona(
            "pending",
            "ct200-pending",
            "read",
            "read token; access request to the gated drafter awaiting review",
            gated_status="pending",
        ),
        Persona(
            "fine_grained_no_gated",
            "ct200-fg-no-gated",
            "fineGrained",
            "fine-grained token with canReadGatedRepos=false; access granted, but the token lacks the gated scope",
            can_read_gated=False,
        ),
        Persona(
            "invalid",
            "ct200-invalid",
            "read",
            "well-formed token unknown to the Hub (revoked): 401 without X-Error-Code everywhere",
            gated_status=None,
            valid=False,
        ),
    )
}


def _base62(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = []
    while number:
        number, rem = divmod(number, 62)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out)) or "0"


def token_for(name: str) -> str:
    """Return the token of persona ``name`` (derived, never stored)."""
    if name not in PERSONAS:
        raise KeyError(f"unknown persona {name!r}; known personas: {', '.join(sorted(PERSONAS))}")
    digest = hashlib.sha256((_TOKEN_SALT + name).encode()).digest()
    body = _base62(digest).rjust(TOKEN_BODY_LENGTH, "0")[:TOKEN_BODY_LENGTH]
    return "hf_" + body


def persona_for_token(token: str | None) -> Persona | None:
    """Map a bearer token to its persona; ``None`` if unknown or invalid."""
    if not token:
        return None
    for persona in PERSONAS.values():
        if persona.valid and token == token_for(persona.name):
            return persona
    return None
