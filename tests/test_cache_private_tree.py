"""A private node cache is this user's alone all the way down: every directory 0700 and every
file 0600, whatever the umask, the compile key's toolchain memo included."""
import os
import stat
import subprocess
import sys


def test_a_fresh_cache_tree_is_private_under_a_permissive_umask(tmp_path):
    cache = tmp_path / "cache"
    script = ("import os; os.umask(0o022)\n"
              "from kiln.cache import Cache\n"
              "from kiln.proto.key import compiler_identity\n"
              "compiler_identity()\n"  # writes toolchain.json into the cache directory first
              "with Cache() as c:\n"
              "    c.put_result('ab' * 32, {'cubin': os.urandom(200_000), 'ptx': 'small'}, {'name': 'k'})\n")
    env = {**os.environ, "KILN_CACHE_DIR": str(cache)}
    env.pop("KILN_CACHE_SHARED", None)
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in [cache, *cache.rglob("*")]}
    assert (cache / "toolchain.json").exists()
    wrong = {path: oct(mode) for path, mode in modes.items()
             if mode != (0o700 if os.path.isdir(tmp_path / path) else 0o600)}
    assert not wrong, wrong


def test_a_cache_directory_made_0755_by_an_older_kiln_is_made_private(tmp_path):
    from kiln.cache import Cache
    (tmp_path / "cache").mkdir(mode=0o755)
    os.chmod(tmp_path / "cache", 0o755)
    with Cache(tmp_path / "cache"):
        pass
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
