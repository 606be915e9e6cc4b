# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""The collection's one redaction (module_utils/redact.py) for playbooks: text a task prints that came from
a process or a server (a journal tail, an answer) before it is printed. SGLang 0.5.23 logs its server_args,
API key included, at start: the journal tail a failed start prints goes through this filter."""

from __future__ import annotations

from ansible_collections.ct200.deploy.plugins.module_utils.redact import scrub


def redact(value, secrets=None):
    """``value`` (a string, or a list/dict of them) with the secrets and token-shaped strings masked."""
    return scrub(value, [s for s in (secrets or []) if isinstance(s, str)])


class FilterModule:
    def filters(self):
        return {"redact": redact}
