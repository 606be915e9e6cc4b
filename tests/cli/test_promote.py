# SPDX-License-Identifier: Apache-2.0
"""`ct200 promote-token`: the new token becomes the vault file's current token, the old one
is kept as <var>_previous, everything else in the file is untouched; atomic; idempotent."""

import io
import json
import os
import sys

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from ct200_fleet import cli
from ct200_fleet.promote import promote
from ct200_fleet.errors import CliError
from localhub.personas import token_for

OLD, NEW = token_for("granted"), token_for("granted_write")
VAULT_TEXT = ("---\n# the production vault\nvault_hf_token: \"%s\"\nvault_hf_token_next: \"%s\"\n"
              "other_secret: keep-me  # comment kept\n" % (OLD, NEW))


@pytest.fixture
def vault_file(tmp_path):
    path = tmp_path / "vault.yml"
    path.write_text(VAULT_TEXT)
    path.chmod(0o640)
    return path


def test_promotes_and_keeps_the_previous_for_rollback(vault_file):
    result = promote(str(vault_file), NEW)
    text = vault_file.read_text()
    data = yaml.safe_load(text)
    assert data["vault_hf_token"] == NEW and data["vault_hf_token_previous"] == OLD
    assert data["vault_hf_token_next"] == NEW and data["other_secret"] == "keep-me"
    assert "# the production vault" in text and "# comment kept" in text
    assert (os.stat(vault_file).st_mode & 0o777) == 0o640
    assert result["changed"] is True and result["fingerprint"].startswith("sha256:")
    assert result["previous_fingerprint"] != result["fingerprint"]
    assert OLD not in json.dumps(result) and NEW not in json.dumps(result)
    assert [p.name for p in vault_file.parent.iterdir()] == ["vault.yml"], "no temp file left behind"


def test_promoting_twice_changes_nothing(vault_file):
    promote(str(vault_file), NEW)
    before = vault_file.read_bytes()
    assert promote(str(vault_file), NEW)["changed"] is False
    assert vault_file.read_bytes() == before


def test_encrypted_vault_stays_encrypted(tmp_path, vault_file):
    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    vault = VaultLib([("default", VaultSecret(b"s3cret"))])
    vault_file.write_bytes(vault.encrypt(VAULT_TEXT.encode()))
    promote(str(vault_file), NEW, vault_password_file=str(password))
    raw = vault_file.read_bytes()
    assert raw.startswith(b"$ANSIBLE_VAULT;") and NEW.encode() not in raw
    assert yaml.safe_load(vault.decrypt(raw))["vault_hf_token"] == NEW


def test_encrypted_vault_without_password_is_refused(vault_file):
    vault = VaultLib([("default", VaultSecret(b"s3cret"))])
    vault_file.write_bytes(vault.encrypt(VAULT_TEXT.encode()))
    before = vault_file.read_bytes()
    with pytest.raises(CliError, match="--vault-password-file"):
        promote(str(vault_file), NEW)
    assert vault_file.read_bytes() == before


def test_multiline_value_is_refused_and_the_file_untouched(vault_file):
    vault_file.write_text("vault_hf_token: >-\n  %s\n" % OLD)
    before = vault_file.read_bytes()
    with pytest.raises(CliError, match="not a one-line value"):
        promote(str(vault_file), NEW)
    assert vault_file.read_bytes() == before


def test_symlinked_vault_file_is_refused(tmp_path, vault_file):
    link = tmp_path / "link.yml"
    link.symlink_to(vault_file)
    with pytest.raises(CliError, match="symlink"):
        promote(str(link), NEW)


def local_fleet(tmp_path, tokens):
    """Hosts that are this machine (connection local), each with its own token file path."""
    hosts = {}
    for name, token in tokens.items():
        path = tmp_path / ("token-" + name)
        path.write_text(token + "\n")
        path.chmod(0o600)
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                       "rotate_token_path": str(path)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"ct200": {"hosts": hosts, "vars": {"ct200_download_user": "root"}}}))
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


def test_promote_token_command_once_every_host_holds_it(no_env_token, vault_file, tmp_path, capsys):
    inventory = local_fleet(tmp_path, {"cli-a": NEW, "cli-b": NEW})
    code, out, summary = promote_command(tmp_path, vault_file, inventory)
    assert code == 0, out + capsys.readouterr().err
    assert "promoted: vault_hf_token" in out and NEW not in out
    assert yaml.safe_load(vault_file.read_text())["vault_hf_token"] == NEW
    assert summary["ok"] and summary["promotion"]["changed"] is True
    assert {h["host"]: h["status"] for h in summary["promotion"]["hosts"]} == {"cli-a": "in_sync", "cli-b": "in_sync"}


def test_promote_token_refused_while_a_host_lacks_it(no_env_token, vault_file, tmp_path, capsys):
    inventory = local_fleet(tmp_path, {"cli-a": NEW, "cli-b": OLD})
    before = vault_file.read_bytes()
    code, out, summary = promote_command(tmp_path, vault_file, inventory)
    assert code == 1, out + capsys.readouterr().err
    assert "not promoted" in out and "FAILED: cli-b" in out
    assert vault_file.read_bytes() == before
    assert summary["ok"] is False
    assert {h["host"]: h["status"] for h in summary["promotion"]["hosts"]} == {"cli-a": "in_sync", "cli-b": "drift"}
