"""redis-py's import (~100 ms) happens off a first call's path: `import kiln` starts it in a
background thread where KILN_REMOTE_CACHE is set, and nowhere else (issue 11)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("redis", reason="the shared tier needs redis-py (a dependency of kiln)")

PROBE = r"""
import json, os, sys
import kiln
from kiln.cache import remote
started = remote._client_import is not None and remote._client_import.name == "kiln-redis-import"
remote._client_imported()
pid = os.fork()  # waits for the import: a child never inherits a half-imported module's lock
if pid == 0:
    import redis
    os._exit(0 if hasattr(redis, "Redis") else 3)
_, status = os.waitpid(pid, 0)
print(json.dumps({"started": started, "redis": "redis" in sys.modules, "child": status}))
"""


def probe(**env) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_REMOTE_CACHE", "KILN_INTERPRET")} | env
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_import_kiln_imports_redis_in_the_background_only_where_a_tier_is_set():
    assert probe(KILN_REMOTE_CACHE="redis://127.0.0.1:1/0") == {"started": True, "redis": True, "child": 0}
    assert probe() == {"started": False, "redis": False, "child": 0}
    assert probe(KILN_REMOTE_CACHE="redis://127.0.0.1:1/0", KILN_INTERPRET="1")["started"] is False
