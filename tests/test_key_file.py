"""The payload key file and `keygen`: written 0600 and never printed, rotated by
adding a current key beside the old ones, and refused in one line when it is a
link, not a file, open to other accounts, or not base64 of 32-byte keys; and
`[encryption] key_file` / DURABLE_MANUS_ENCRYPTION_KEY_FILE, opt-in."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from config.config_file import REPO_DIR, ConfigError
from config.key_file import read_key_ring
from runtime.connection import data_converter
from runtime.worker_factory import operator_files
from testkit.settings import config_error, load_config, make_settings


def keys_in(path) -> dict[str, str]:
    return json.loads(path.read_text())["keys"]


def test_keygen_writes_a_private_key_file_and_never_prints_a_key(cli, tmp_path):
    path = tmp_path / "secrets" / "keys.json"
    made = cli("keygen", str(path))
    assert made.returncode == 0, made
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    document = json.loads(path.read_text())
    assert document["current"] == "k1" and list(document["keys"]) == ["k1"]
    assert len(base64.b64decode(document["keys"]["k1"], validate=True)) == 32
    assert document["keys"]["k1"] not in made.stdout + made.stderr
    assert "k1" in made.stdout and "[encryption] key_file" in made.stdout and made.stdout.count("\n") == 1
    assert read_key_ring(path).current == "k1"


def test_keygen_again_rotates_keeping_the_old_keys(cli, tmp_path):
    path = tmp_path / "keys.json"
    assert cli("keygen", str(path)).returncode == 0
    first = keys_in(path)
    rotated = cli("keygen", str(path))
    assert rotated.returncode == 0, rotated
    ring = read_key_ring(path)
    assert ring.current == "k2" and set(ring.keys) == {"k1", "k2"}
    assert keys_in(path)["k1"] == first["k1"] and keys_in(path)["k2"] != first["k1"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert all(key not in rotated.stdout for key in keys_in(path).values())
    assert "k2" in rotated.stdout and "older keys kept (k1)" in rotated.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]  # no draft left behind


def test_keygen_refuses_a_link_and_a_file_that_is_no_key_file(cli, tmp_path):
    real = tmp_path / "real.json"
    assert cli("keygen", str(real)).returncode == 0
    link = tmp_path / "link.json"
    link.symlink_to(real)
    refused = cli("keygen", str(link))
    assert refused.returncode == 2 and "symbolic link" in refused.stderr and refused.stderr.count("\n") == 1
    assert read_key_ring(real).current == "k1"  # the link's target is untouched
    notes = tmp_path / "notes.json"
    notes.write_text('{"hello": 1}')
    notes.chmod(0o600)
    refused = cli("keygen", str(notes))
    assert refused.returncode == 2 and "exactly" in refused.stderr and notes.read_text() == '{"hello": 1}'


def write_private(path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)


GOOD_KEY = base64.b64encode(bytes(range(32))).decode()


@pytest.mark.parametrize(
    "text, problem",
    [
        ("not json", "is not JSON"),
        ('{"keys": {}}', "exactly"),
        ('{"current": "k1", "keys": {}}', "at least one key"),
        ('{"current": "k1", "keys": {"k1": "@@@not base64@@@"}}', "key 'k1' is not base64"),
        ('{"current": "k1", "keys": {"k1": 7}}', "key 'k1' is not base64"),
        (f'{{"current": "k1", "keys": {{"k1": "{base64.b64encode(bytes(16)).decode()}"}}}}', "is 16 bytes; AES-256 needs 32"),
        (f'{{"current": "k2", "keys": {{"k1": "{GOOD_KEY}"}}}}', '"current" must name one of its keys (k1)'),
        (f'{{"current": "a b", "keys": {{"a b": "{GOOD_KEY}"}}}}', "key id 'a b'"),
    ],
)
def test_a_malformed_key_file_is_one_line_without_the_key(tmp_path, text, problem):
    path = tmp_path / "keys.json"
    write_private(path, text)
    with pytest.raises(ConfigError) as refused:
        read_key_ring(path)
    message = str(refused.value)
    assert problem in message and str(path) in message and "\n" not in message
    assert GOOD_KEY not in message


def test_a_key_file_others_may_open_a_link_or_not_a_file_is_refused(tmp_path):
    path = tmp_path / "keys.json"
    write_private(path, f'{{"current": "k1", "keys": {{"k1": "{GOOD_KEY}"}}}}')
    assert read_key_ring(path).keys["k1"] == bytes(range(32))
    for mode in (0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(ConfigError, match=f"open to other accounts \\(mode 0{mode:o}\\); chmod 600"):
            read_key_ring(path)
    path.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(ConfigError, match="symbolic link"):
        read_key_ring(link)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="not a regular file \\(it is a FIFO\\)"):
        read_key_ring(fifo)  # O_NONBLOCK: refused at once, not waited on
    with pytest.raises(ConfigError, match="not a regular file \\(it is a directory\\)"):
        read_key_ring(tmp_path)
    with pytest.raises(ConfigError, match="key file not found .*keygen"):
        read_key_ring(tmp_path / "missing.json")


def test_encryption_is_opt_in_and_read_from_the_file_or_the_variable(tmp_path):
    assert load_config(tmp_path, "").encryption.key_ring() is None
    from temporalio.contrib.pydantic import pydantic_data_converter

    assert data_converter(load_config(tmp_path, "").encryption) is pydantic_data_converter  # no key file, no codec
    path = tmp_path / "keys.json"
    write_private(path, f'{{"current": "k1", "keys": {{"k1": "{GOOD_KEY}"}}}}')
    from_file = load_config(tmp_path, f'[encryption]\nkey_file = "{path}"\n')
    assert from_file.encryption.key_ring().current == "k1"
    from_env = load_config(tmp_path, "", {"DURABLE_MANUS_ENCRYPTION_KEY_FILE": str(path)})
    assert from_env.encryption.key_path == path
    assert data_converter(from_env.encryption).payload_codec is not None
    relative = load_config(tmp_path, '[encryption]\nkey_file = ".data/keys.json"\n')
    assert relative.encryption.key_path == REPO_DIR / ".data" / "keys.json"  # as [workspace] root is


def test_the_encryption_table_is_checked_like_the_others(tmp_path):
    assert "[encryption] key_fil: Extra inputs are not permitted" in config_error(tmp_path, '[encryption]\nkey_fil = "x"\n')
    assert "codec_port" in config_error(tmp_path, "[encryption]\ncodec_port = 70000\n")
    assert "must be an origin" in config_error(tmp_path, '[encryption]\nweb_ui_origins = ["https://ui.example/path"]\n')
    ok = load_config(tmp_path, '[encryption]\nweb_ui_origins = ["https://UI.example:8443"]\n')
    assert ok.encryption.web_ui_origins == ["https://ui.example:8443"]


def test_a_bad_key_file_stops_a_command_before_it_reaches_any_server(cli, tmp_path):
    path = tmp_path / "keys.json"
    write_private(path, "{}")
    for args in (["list"], ["run", "--detach", "a task"], ["codec-server"]):
        done = cli(*args, env_extra={"DURABLE_MANUS_ENCRYPTION_KEY_FILE": str(path)})
        assert done.returncode == 2 and str(path) in done.stderr and done.stderr.count("\n") == 1, (args, done)
        assert "starting the embedded" not in done.stdout


def test_codec_server_without_a_key_file_says_how_to_make_one(cli):
    done = cli("codec-server")
    assert done.returncode == 2 and "keygen" in done.stderr and done.stderr.count("\n") == 1


def test_tool_code_is_never_shown_the_key_file(tmp_path):
    settings = make_settings("http://127.0.0.1:9/v1", tmp_path / "workspace")
    settings.encryption.key_file = str(tmp_path / "keys.json")
    assert tmp_path / "keys.json" in operator_files(settings)
