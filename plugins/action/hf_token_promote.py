# -*- coding: utf-8 -*-
# Copyright: ct200-deploy developers
# SPDX-License-Identifier: Apache-2.0
"""Promote the pending token into the file the inventory reads its current token from, on the
controller. An action, not a module: an ansible-vault variable file is decrypted and re-encrypted
with the secrets this ansible-playbook run was given (--vault-password-file, --ask-vault-pass),
which only the controller process holds. The logic is ``module_utils/token_promotion``."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.ct200.deploy.plugins.module_utils import token_promotion


class RunVault:
    """The run's vault secrets, for token_promotion (decrypt, and encrypt with the file's own vault id)."""

    def __init__(self, vaultlib):
        self._vault = vaultlib

    def can_decrypt(self):
        return bool(self._vault.secrets)

    def decrypt(self, data):
        return self._vault.decrypt(data)

    def encrypt(self, data, original):
        from ansible.parsing.vault import parse_vaulttext_envelope
        _unused, _version, _cipher, vault_id = parse_vaulttext_envelope(original)
        secrets = dict(self._vault.secrets)
        secret = secrets.get(vault_id) or self._vault.secrets[0][1]
        return self._vault.encrypt(data, secret=secret, vault_id=None if vault_id == "default" else vault_id)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(token_promotion.ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [name for name in ("token", "path") if not args.get(name)]
        spec = token_promotion.ARGUMENT_SPEC
        target = args.get("target", spec["target"]["default"])
        if missing or target not in token_promotion.TARGETS:
            return dict(result, failed=True, msg="hf_token_promote needs token and path, and target token_file or "
                                                 "vars_file (missing: %s, target: %s)" % (missing, target))
        try:
            if target == "token_file":
                out = token_promotion.promote_token_file(args["path"], args["token"], check_mode=self._task.check_mode)
            else:
                out = token_promotion.promote_vars_file(args["path"], args["token"], args.get("var") or spec["var"]["default"],
                                                        vault=RunVault(self._loader._vault),  # pylint: disable=protected-access
                                                        check_mode=self._task.check_mode)
        except token_promotion.PromotionError as exc:
            return dict(result, failed=True, changed=False, msg=str(exc))
        warnings = out.pop("warnings")
        if warnings:
            result["warnings"] = result.get("warnings", []) + warnings
        result.update(out)
        return result
