# SPDX-License-Identifier: Apache-2.0
"""Promotion (module_utils/token_promotion through the ct200.deploy.hf_token_promote action, the one
implementation for a vault file and a controller token file): the new token becomes the file's current
token, the old one is kept as <var>_previous (or a 0600 backup), everything else in the file is
untouched; atomic; idempotent. A plain-text vault file that its group or others can read is refused
with the fix (ansible-vault encrypt); a new file is born 0600. `ct200 promote-token` runs
playbooks/promote_hf_token.yml for both kinds."""

import io
import json
import os
import sys

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from ansible_collections.ct200.deploy.plugins.action.hf_token_promote import RunVault
from ansible_collections.ct200.deploy.plugins.module_utils.token_promotion import (
    PromotionError, promote_token_file, promote_vars_file)
from ct200_fleet import cli
from localhub.personas import token_for

OLD, NEW = token_for("granted"), token_for("granted_write")
VAULT_TEXT = ("---\n# the production vault\nvault_hf_token: \"%s\"\nvault_hf_token_next: \"%s\"\n"
              "other_secret: keep-me  # comment kept\n" % (OLD, NEW))


@pytest.fixture
def vault_file(tmp_path):
    path = tmp_path / "vault.yml"
    path.write_text(VAULT_TEXT)
    path.chmod(0o600)
    return path


def promote(path, token, vault_password=None):
    vault = RunVault(VaultLib([("default", VaultSecret(vault_password))] if vault_password else []))
    return promote_vars_file(path, token, "vault_hf_token", vault=vault)


def test_promotes_and_keeps_the_previous_for_rollback(vault_file):
    result = promote(str(vault_file), NEW)
    text = vault_file.read_text()
    data = yaml.safe_load(text)
    assert data["vault_hf_token"] == NEW and data["vault_hf_token_previous"] == OLD
    assert data["vault_hf_token_next"] == NEW and data["other_secret"] == "keep-me"
    assert "# the production vault" in text and "# comment kept" in text
    assert (os.stat(vault_file).st_mode & 0o777) == 0o600
    assert result["changed"] is True and result["fingerprint"].startswith("sha256:")
    assert result["previous_fingerprint"] != result["fingerprint"]
    assert OLD not in json.dumps(result) and NEW not in json.dumps(result)
    assert [p.name for p in vault_file.parent.iterdir()] == ["vault.yml"], "no temp file left behind"


def test_promoting_twice_changes_nothing(vault_file):
    promote(str(vault_file), NEW)
    before = vault_file.read_bytes()
    assert promote(str(vault_file), NEW)["changed"] is False
    assert vault_file.read_bytes() == before


def test_encrypted_vault_stays_encrypted_with_its_mode(vault_file):
    vault = VaultLib([("default", VaultSecret(b"s3cret"))])
    vault_file.write_bytes(vault.encrypt(VAULT_TEXT.encode()))
    vault_file.chmod(0o644)  # encrypted: readable is fine, and the operator's mode is kept
    result = promote(str(vault_file), NEW, vault_password=b"s3cret")
    raw = vault_file.read_bytes()
    assert raw.startswith(b"$ANSIBLE_VAULT;") and NEW.encode() not in raw
    assert yaml.safe_load(vault.decrypt(raw))["vault_hf_token"] == NEW
    assert (os.stat(vault_file).st_mode & 0o777) == 0o644 and result["encrypted"] and not result["warnings"]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_plain_text_vault_readable_by_others_is_refused_with_the_fix(vault_file, mode):
    """Regression (issue 18): the new token was written in plain text into a 0644 file, mode kept."""
    vault_file.chmod(mode)
    before = vault_file.read_bytes()
    with pytest.raises(PromotionError, match="plain text and readable by its group or others") as refused:
        promote(str(vault_file), NEW)
    assert "ansible-vault encrypt %s" % vault_file in str(refused.value) and NEW not in str(refused.value)
    assert vault_file.read_bytes() == before and (os.stat(vault_file).st_mode & 0o777) == mode


def test_plain_text_vault_of_its_owner_only_is_promoted_with_the_advice_to_encrypt(vault_file):
    result = promote(str(vault_file), NEW)
    assert result["changed"] and (os.stat(vault_file).st_mode & 0o777) == 0o600
    assert any("ansible-vault encrypt %s" % vault_file in w for w in result["warnings"])


def test_a_missing_vault_file_is_born_0600(tmp_path):
    path = tmp_path / "vault.yml"
    result = promote(str(path), NEW)
    assert result["created"] and result["changed"] and result["previous_fingerprint"] is None
    assert (os.stat(path).st_mode & 0o777) == 0o600
    assert yaml.safe_load(path.read_text()) == {"vault_hf_token": NEW}
    assert any("ansible-vault encrypt" in w for w in result["warnings"])


def test_controller_token_file_is_born_0600_with_a_0600_backup(tmp_path):
    path = tmp_path / "current-token"
    path.write_text(OLD + "\n")
    path.chmod(0o644)
    result = promote_token_file(str(path), NEW)
    assert path.read_text().strip() == NEW and (os.stat(path).st_mode & 0o777) == 0o600
    backup = result["backup_file"]
    assert open(backup).read().strip() == OLD and (os.stat(backup).st_mode & 0o777) == 0o600
    assert result["previous_fingerprint"] != result["fingerprint"] and OLD not in json.dumps(result)
    assert promote_token_file(str(path), NEW)["changed"] is False


def test_encrypted_vault_without_password_is_refused(vault_file):
    vault = VaultLib([("default", VaultSecret(b"s3cret"))])
    vault_file.write_bytes(vault.encrypt(VAULT_TEXT.encode()))
    before = vault_file.read_bytes()
    with pytest.raises(PromotionError, match="--vault-password-file"):
        promote(str(vault_file), NEW)
    assert vault_file.read_bytes() == before


def test_multiline_value_is_refused_and_the_file_untouched(vault_file):
    vault_file.write_text("vault_hf_token: >-\n  %s\n" % OLD)
    before = vault_file.read_bytes()
    with pytest.raises(PromotionError, match="not a one-line value"):
        promote(str(vault_file), NEW)
    assert vault_file.read_bytes() == before


def test_symlinked_vault_file_is_refused(tmp_path, vault_file):
    link = tmp_path / "link.yml"
    link.symlink_to(vault_file)
    with pytest.raises(PromotionError, match="symlink"):
        promote(str(link), NEW)


def local_fleet(tmp_path, tokens, hub):
    """Hosts that are this machine (connection local), each with its own token file path."""
    hosts = {}
    for name, token in tokens.items():
        path = tmp_path / ("token-" + name)
        path.write_text(token + "\n")
        path.chmod(0o600)
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "rotate_token_path": str(path)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": {"ct200_download_user": "root",
                                                                            "ct200_hf_endpoint": hub.url}}}))
    return str(inventory)


def promote_command(tmp_path, vault_file, inventory):
    out = io.StringIO()
    code = cli.main(["promote-token", "-i", inventory, "--vault-file", str(vault_file), "--token-stdin",
                     "--json", str(tmp_path / "p.json")], stdin=io.BytesIO((NEW + "\n").encode()), out=out)
    return code, out.getvalue(), json.loads((tmp_path / "p.json").read_text())


@pytest.fixture
def no_env_token(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def test_promote_token_command_once_every_host_holds_it(no_env_token, vault_file, tmp_path, capsys, local_hub):
    inventory = local_fleet(tmp_path, {"cli-a": NEW, "cli-b": NEW}, local_hub)
    code, out, summary = promote_command(tmp_path, vault_file, inventory)
    assert code == 0, out + capsys.readouterr().err
    assert "promoted: vault_hf_token" in out and NEW not in out
    assert yaml.safe_load(vault_file.read_text())["vault_hf_token"] == NEW
    assert summary["ok"] and summary["promotion"]["changed"] is True
    assert {h["host"]: h["status"] for h in summary["promotion"]["hosts"]} == {"cli-a": "in_sync", "cli-b": "in_sync"}


def test_promote_token_refused_while_a_host_lacks_it(no_env_token, vault_file, tmp_path, capsys, local_hub):
    inventory = local_fleet(tmp_path, {"cli-a": NEW, "cli-b": OLD}, local_hub)
    before = vault_file.read_bytes()
    code, out, summary = promote_command(tmp_path, vault_file, inventory)
    assert code == 1, out + capsys.readouterr().err
    assert "not promoted" in out and "FAILED: cli-b" in out
    assert vault_file.read_bytes() == before
    assert summary["ok"] is False
    assert {h["host"]: h["status"] for h in summary["promotion"]["hosts"]} == {"cli-a": "in_sync", "cli-b": "drift"}


def test_promote_token_command_refuses_a_plain_text_vault_file_others_can_read(no_env_token, vault_file, tmp_path,
                                                                               capsys, local_hub):
    vault_file.chmod(0o644)
    before = vault_file.read_bytes()
    inventory = local_fleet(tmp_path, {"cli-a": NEW}, local_hub)
    code, out, summary = promote_command(tmp_path, vault_file, inventory)
    assert code == 1, out + capsys.readouterr().err
    assert "not promoted" in out and summary["ok"] is False and NEW not in out
    assert vault_file.read_bytes() == before


def test_promote_token_command_into_a_controller_token_file(no_env_token, tmp_path, capsys, local_hub):
    """The same playbook and action as the vault file: one promotion implementation for both."""
    current = tmp_path / "current-token"
    current.write_text(OLD + "\n")
    current.chmod(0o600)
    inventory = local_fleet(tmp_path, {"cli-a": NEW}, local_hub)
    out = io.StringIO()
    code = cli.main(["promote-token", "-i", inventory, "--current-token-file", str(current), "--token-stdin",
                     "--json", str(tmp_path / "p.json")], stdin=io.BytesIO((NEW + "\n").encode()), out=out)
    summary = json.loads((tmp_path / "p.json").read_text())
    assert code == 0, out.getvalue() + capsys.readouterr().err
    assert current.read_text().strip() == NEW and (os.stat(current).st_mode & 0o777) == 0o600
    assert summary["promotion"]["target"] == "token_file" and summary["promotion"]["changed"] is True
    assert NEW not in out.getvalue() and OLD not in json.dumps(summary)
