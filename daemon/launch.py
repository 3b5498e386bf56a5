"""Where the node daemon lives, and starting it on demand: once, under a lock, however
many processes (eight ranks of one job, say) ask at the same moment."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from kiln.cache import env, paths


def default_address() -> str:
    return f"unix:{env.runtime_dir() / 'daemon.sock'}"


def pid_file(address: str | None = None) -> Path:
    """Where the daemon serving `address` (default: the node daemon) writes its pid."""
    if address is None or address == default_address():
        return env.runtime_dir() / "daemon.pid"
    if address.startswith("unix:"):
        return Path(address[len("unix:"):] + ".pid")
    return env.runtime_dir() / f"daemon-{address.rsplit(':', 1)[-1]}.pid"


def log_file() -> Path:
    return env.runtime_dir() / "daemon.log"


def token_file() -> Path:
    """Where a daemon started with --listen and no KILN_DAEMON_TOKEN leaves the token it made (0600)."""
    return env.runtime_dir() / "daemon.token"


def own_token(address: str) -> str | None:
    """The token in token_file(), for a TCP `address` (this user's, on this node); else None."""
    if address.startswith("unix:"):
        return None
    try:
        return token_file().read_text().strip() or None
    except OSError:
        return None


def other_daemons() -> list[tuple[str, int]]:
    """(address, pid) of each daemon of this user's started with --listen and still running."""
    found = []
    for path in sorted(env.runtime_dir().glob("daemon-*.pid")):
        try:
            info = json.loads(path.read_text())
            os.kill(info["pid"], 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append((info["address"], info["pid"]))
    return found


def configured_address() -> str | None:
    """The daemon this process should use: KILN_DAEMON, the node daemon, or None for off."""
    setting = env.daemon_setting()
    if setting == "off":
        return None
    return setting or default_address()


def read_pid_file(address: str | None = None) -> dict | None:
    try:
        return json.loads(pid_file(address).read_text())
    except (OSError, ValueError):
        return None


def ensure_daemon(args=(), idle_exit: float = 900.0, address: str | None = None, timeout: float = 60.0) -> str:
    """The address of a serving daemon (the node daemon unless `address` names a Unix
    socket), started in the background with `args` if none answers there. An auto-started
    daemon exits after `idle_exit` idle seconds (0: never)."""
    address = address or default_address()
    if _answers(address, 0.5):
        return address
    runtime = paths.private_dir(env.runtime_dir())
    with open(runtime / "daemon.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here, then find it serving
        if _answers(address, 2.0):
            return address
        proc = spawn_daemon([*args, "--idle-exit", str(idle_exit)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _answers(address, 1.0):
                return address
            time.sleep(0.05)
            if proc.poll() is not None:  # it may have lost a race with a daemon started by hand
                if _answers(address, 2.0):
                    return address
                break
    raise RuntimeError(f"the kiln daemon did not start; see {log_file()}")


def _answers(address: str, timeout: float) -> bool:
    from .client import Client  # gRPC is loaded only when a daemon is really wanted

    if address.startswith("unix:") and not listening(address[len("unix:"):]):
        return False  # nobody there (or a crashed daemon's socket): no need to wait for an answer

    with Client(address) as client:  # a fresh channel: no reconnect backoff left from earlier tries
        return client.healthy(timeout)


def listening(path: str) -> bool:
    """Whether something accepts connections on the Unix socket `path` (a connect, not a gRPC call)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:  # missing, refused (a stale socket), not a socket
        return False
    finally:
        probe.close()


def spawn_daemon(args, pass_fds=()) -> subprocess.Popen:
    """`python -m kiln.daemon daemon start --foreground ARGS`, detached, logging to log_file();
    `pass_fds` stay open in it (the pipe on which it says that it serves)."""
    paths.private_dir(log_file().parent)
    with open(log_file(), "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "kiln.daemon", "daemon", "start", "--foreground", *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, pass_fds=pass_fds, env=env.environment())
