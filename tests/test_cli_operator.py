"""The `kiln` command as an operator expects it: user mistakes are one-line errors, one socket
address in every shell, --version, --json, LSB exit codes, ccache-style stats, health without
the token, Prometheus histograms and a doctor that names fixes. Each command runs as a process
of its own against real cache directories and real daemons (the fake compile function)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

FAKE_ARGS = ["--workers", "1", "--compile-fn", "kiln.daemon.fake:compile"]


def kiln(*args, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "kiln.daemon", *args], capture_output=True, text=True, timeout=120,
                          env=env, **kwargs)


@pytest.fixture
def node():
    """The environment of a node of its own: a cache directory short enough for the socket
    beneath it, no KILN_DAEMON (the node daemon), no token, no runtime directory named."""
    folder = tempfile.mkdtemp(prefix="ko-", dir="/tmp")
    env = {k: v for k, v in os.environ.items()
           if k not in ("KILN_DAEMON", "KILN_DAEMON_TOKEN", "KILN_RUNTIME_DIR", "XDG_RUNTIME_DIR")}
    env["KILN_CACHE_DIR"] = os.path.join(folder, "c")
    yield env
    kiln("daemon", "stop", env=env)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_shell_with_xdg_runtime_dir_finds_the_daemon_a_batch_job_started(node):
    """An ssh shell has XDG_RUNTIME_DIR, a batch job may not: both use the cache directory's run/."""
    started = kiln("daemon", "start", *FAKE_ARGS, env=node)
    assert started.returncode == 0, started.stderr
    shell = {**node, "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="kx-", dir="/tmp")}
    status = kiln("daemon", "status", env=shell)
    assert status.returncode == 0 and f"unix:{node['KILN_CACHE_DIR']}/run/daemon.sock" in status.stdout, status.stderr
    assert "stopped" in kiln("daemon", "stop", env=shell).stdout
    moved = {**node, "KILN_RUNTIME_DIR": os.path.join(shell["XDG_RUNTIME_DIR"], "k")}  # the explicit override
    assert kiln("daemon", "start", *FAKE_ARGS, env=moved).stdout.strip().endswith(f"{moved['KILN_RUNTIME_DIR']}/daemon.sock")
    assert kiln("daemon", "stop", env=moved).returncode == 0
    shutil.rmtree(shell["XDG_RUNTIME_DIR"])
