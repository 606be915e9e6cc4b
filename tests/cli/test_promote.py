# SPDX-License-Identifier: Apache-2.0
"""`ct200 promote-token`: the new token becomes the vault file's current token, the old one
is kept as <var>_previous, everything else in the file is untouched; atomic; idempotent."""

import io
import json
import os

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


def test_promote_token_command(vault_file, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    out = io.StringIO()
    code = cli.main(["promote-token", "--vault-file", str(vault_file), "--token-stdin",
                     "--json", str(tmp_path / "p.json")], stdin=io.StringIO(NEW + "\n"), out=out)
    assert code == 0, capsys.readouterr().err
    assert "promoted: vault_hf_token" in out.getvalue() and NEW not in out.getvalue()
    assert yaml.safe_load(vault_file.read_text())["vault_hf_token"] == NEW
    assert json.loads((tmp_path / "p.json").read_text())["promotion"]["changed"] is True
