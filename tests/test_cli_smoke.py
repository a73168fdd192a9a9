"""The entry scripts as processes: a few smoke tests. Everything else about
the command line is tested in-process (testkit/cli.py)."""

from __future__ import annotations

from testkit.e2e import run_cli


def test_starter_help():
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert "python starter.py COMMAND --help" in proc.stdout and proc.stderr == ""


def test_worker_help():
    proc = run_cli("--help", script="worker.py")
    assert proc.returncode == 0, proc.stderr
    assert "--connect-timeout" in proc.stdout and proc.stderr == ""


def test_starter_bad_input_is_one_line_and_exit_2():
    proc = run_cli("--agent", "wizard", "do it")
    assert (proc.returncode, proc.stdout) == (2, "")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("starter: unknown agent 'wizard'") and "manus" in line, proc.stderr


def test_worker_bad_input_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "none.toml"
    proc = run_cli(script="worker.py", env_extra={"DURABLE_MANUS_CONFIG": str(missing)})
    assert (proc.returncode, proc.stdout) == (2, "")
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"worker: {missing}: config file not found"), proc.stderr
