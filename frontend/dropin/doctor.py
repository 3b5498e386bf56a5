"""`kiln doctor`: which implementation `import triton` gives in this environment, and why; and
the node's checks (driver, toolkit, cache directory, daemon, shared tier, sharing switches),
each ok or with its fix."""
from __future__ import annotations

import importlib.machinery
import json
import os
import site
import subprocess
import sys

from . import hook
from .setup_hook import PTH_NAME

# Run in a fresh interpreter with the caller's environment: what a job started now would get.
_PROBE = """
import json, sys
out = {}
try:
    import triton
    out.update(module=triton.__name__, file=getattr(triton, "__file__", None), version=triton.__version__,
               kiln=bool(getattr(triton, "DROPIN", False)))
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def installed_hook() -> str | None:
    """The path of kiln-dropin.pth in this Python's site-packages, or None."""
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    for directory in dirs:
        path = os.path.join(directory, PTH_NAME)
        if os.path.isfile(path):
            return path
    return None


def installed_triton() -> dict | None:
    """The real Triton on sys.path, looked up without kiln's finder and without importing it."""
    spec = importlib.machinery.PathFinder.find_spec("triton")
    if spec is None:
        return None
    location = spec.origin or (list(spec.submodule_search_locations or [""])[0])
    version = None
    try:
        from importlib.metadata import version as dist_version
        version = dist_version("triton")
    except Exception:  # noqa: BLE001  (a source checkout has no distribution metadata)
        pass
    return {"location": location, "version": version}


def report(environ=None) -> dict:
    from kiln.cache import env
    environ = env.environment() if environ is None else dict(environ)
    value = environ.get(hook.ENV)
    try:
        asked, problem = hook.requested(environ), None
    except ValueError as e:
        asked, problem = False, str(e)
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=environ, capture_output=True, text=True, timeout=120)
    try:
        result = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"error": f"the probe failed: {probe.stderr.strip()[-500:]}"}
    pth = installed_hook()
    if result.get("kiln"):
        why = f"{hook.ENV}={value} and {pth} resolves `import triton` to kiln in every Python of this environment"
    elif problem:
        why = problem
    elif not asked:
        why = f"{hook.ENV} is not set: kiln's drop-in mode is off (`kiln run -- CMD` or {hook.ENV}=1 turns it on)"
    elif pth is None:
        why = f"{hook.ENV}={value} but kiln's hook ({PTH_NAME}) is not installed in {sys.executable}'s " \
              "site-packages: reinstall kiln (pip install kiln, or pip install -e . in a checkout)"
    else:
        why = f"{hook.ENV}={value} and the hook is installed, yet `import triton` is not kiln: " \
              f"{result.get('error') or result.get('file')}"
    return {"import_triton": "kiln" if result.get("kiln") else ("triton" if "module" in result else "none"),
            "module": result.get("module"), "file": result.get("file"), "version": result.get("version"),
            "error": result.get("error"), "why": why, "KILN_DROPIN": value, "hook": pth,
            "installed_triton": installed_triton(), "python": sys.executable}


def format_report(r: dict) -> str:
    if r["import_triton"] == "kiln":
        head = f"import triton -> kiln (Triton {r['version']} API), {r['file']}"
    elif r["import_triton"] == "triton":
        head = f"import triton -> Triton {r['version']}, {r['file']}"
    else:
        head = f"import triton -> fails ({r['error']})"
    real = r["installed_triton"]
    lines = [head, f"  why: {r['why']}",
             f"  hook: {r['hook'] or 'not installed'}",
             "  installed Triton: " + (f"{real['version'] or '?'} at {real['location']}" +
                                       (" (shadowed by kiln while the drop-in mode is on)"
                                        if r["import_triton"] == "kiln" else "") if real else "none"),
             f"  python: {r['python']}"]
    return "\n".join(lines)


# --- the node: driver, toolkit, cache, daemon, shared tier, sharing switches -------------------
# Each check is {name, status, detail, fix}: "ok"; "warn", works with less (no driver: compile
# only); "fail", broken until the fix is made. `kiln doctor` exits 1 on a failure.

OK, WARN, FAIL = "ok", "warn", "fail"
LLVMLITE_FLOOR = (0, 48)  # 0.43-0.44 fail to compile; 0.45-0.47 drop .maxntid/.maxnreg from the PTX
NVJITLINK_FIX = "pip install 'kiln[cu13]' (CUDA 13 drivers, >= 580) or 'kiln[cu12]' (CUDA 12 drivers)"


def _check(name: str, status: str, detail: str, fix: str | None = None) -> dict:
    return {"name": name, "status": status, "detail": detail, "fix": fix}


def node_checks(environ=None) -> list[dict]:
    """The node's checks, in the order a compile meets them; a check that raises is a failure."""
    from kiln.cache import env
    environ = env.environment() if environ is None else dict(environ)
    out = []
    for name, check in (("driver", check_driver), ("nvJitLink", check_nvjitlink), ("libdevice", check_libdevice),
                        ("llvmlite", check_llvmlite), ("cache", check_cache_dir), ("daemon", check_daemon),
                        ("shared tier", check_shared_tier), ("sharing", lambda: check_sharing(environ))):
        try:
            out.append(check())
        except Exception as e:  # noqa: BLE001 - the doctor reports what it could not check, and goes on
            out.append(_check(name, FAIL, f"the check itself failed: {type(e).__name__}: {e}",
                              "run it again; report it to kiln's maintainers if it persists"))
    return out


def _cuda_version(v: int) -> str:
    """12080 -> "12.8", as CUDA numbers its versions."""
    return f"{v // 1000}.{v % 1000 // 10}"


def check_driver() -> dict:
    try:
        from cuda.bindings import driver
    except ImportError as e:
        return _check("driver", FAIL, f"cuda-bindings is missing ({e})", "pip install cuda-bindings")
    try:
        err, version = driver.cuDriverGetVersion()
    except Exception as e:  # noqa: BLE001 - no libcuda: what a CPU host or a container without GPUs has
        return _check("driver", WARN, f"no driver: compile-only ({type(e).__name__})",
                      "kernels compile here; to launch them, run on a host with the NVIDIA driver")
    if err != driver.CUresult.CUDA_SUCCESS:
        return _check("driver", WARN, f"no driver: compile-only (cuDriverGetVersion: {err.name})",
                      "kernels compile here; to launch them, run on a host with a working NVIDIA driver")
    linker = _nvjitlink_version()
    if linker and version // 1000 < linker[0]:  # the driver cannot load the cubins this nvJitLink links
        return _check("driver", WARN, f"CUDA {_cuda_version(version)} is older than nvJitLink {linker[0]}.{linker[1]}: "
                      "kiln loads its kernels' PTX instead of their cubins (JIT at each first launch)",
                      f"update the driver to CUDA {linker[0]}, or pip install 'kiln[cu{version // 1000}]'")
    return _check("driver", OK, f"CUDA {_cuda_version(version)} (cuDriverGetVersion {version})")


def _nvjitlink_version() -> tuple[int, int] | None:
    try:
        from cuda.bindings import nvjitlink
        return tuple(nvjitlink.version())
    except Exception:  # noqa: BLE001 - missing package or library: check_nvjitlink says which
        return None


def check_nvjitlink() -> dict:
    try:
        from cuda.bindings import nvjitlink
        major, minor = nvjitlink.version()
    except Exception as e:  # noqa: BLE001 - ImportError, or the library not found
        return _check("nvJitLink", FAIL, f"cannot link cubins: {type(e).__name__}: {e}", NVJITLINK_FIX)
    return _check("nvJitLink", OK, f"{major}.{minor}")


def check_libdevice() -> dict:
    from kiln.codegen.libdevice import libdevice_path
    try:
        path = libdevice_path()
    except Exception as e:  # noqa: BLE001 - FileNotFoundError (its message names the package), a broken install
        return _check("libdevice", FAIL, f"not found: kernels that call math functions cannot compile ({e})",
                      "pip install 'kiln[cu13]' or 'kiln[cu12]', install the CUDA toolkit, or set KILN_LIBDEVICE")
    return _check("libdevice", OK, path)


def check_llvmlite() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    try:
        found = version("llvmlite")
    except PackageNotFoundError:
        return _check("llvmlite", FAIL, "not installed", f"pip install 'llvmlite>={_dotted(LLVMLITE_FLOOR)}'")
    import llvmlite.binding as llvm
    detail = f"{found} (LLVM {_dotted(llvm.llvm_version_info)}), floor {_dotted(LLVMLITE_FLOOR)}"
    if _version_tuple(found) < LLVMLITE_FLOOR:
        return _check("llvmlite", FAIL, f"{detail}: too old (it fails, or drops .maxntid/.maxnreg from the PTX)",
                      f"pip install 'llvmlite>={_dotted(LLVMLITE_FLOOR)}'")
    return _check("llvmlite", OK, detail)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        parts.append(int(digits or 0))
    return tuple(parts)


def _dotted(version) -> str:
    return ".".join(str(v) for v in version)


def check_cache_dir() -> dict:
    from kiln.cache import env, paths
    path, shared = env.cache_dir(), env.cache_shared()
    kind = "group-shared (2770)" if shared else "this user's alone (0700)"
    if not path.exists():
        parent = next(p for p in path.parents if p.exists())
        if not os.access(parent, os.W_OK | os.X_OK):
            return _check("cache", FAIL, f"{path} does not exist and {parent} cannot be written",
                          "set KILN_CACHE_DIR to a directory this user can write")
        return _check("cache", OK, f"{path}: not made yet (the first compile makes it, {kind})")
    try:
        paths.check_dir(path, shared=shared)
        runtime = env.runtime_dir()
        if runtime.exists():
            paths.check_socket_dir(runtime)
    except paths.UnsafePathError as e:
        return _check("cache", FAIL, str(e).removeprefix("kiln: "),
                      "chmod go-w (or remove) it, or set KILN_CACHE_DIR / KILN_RUNTIME_DIR elsewhere")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return _check("cache", FAIL, f"{path}: this user cannot read and write it", f"chmod u+rwx {path}")
    mode = os.stat(path).st_mode & 0o7777
    owner = "this user's and its group's" if shared else "this user's, writable by no one else"
    return _check("cache", OK, f"{path}: {owner} (mode {mode:o}); the daemon's directory {env.runtime_dir()}")


def check_daemon() -> dict:
    import grpc

    from kiln.cache import env
    from kiln.daemon import launch
    from kiln.daemon.client import Client

    address = launch.configured_address()
    if address is None:
        return _check("daemon", OK, "KILN_DAEMON=off: each process compiles its kernels itself")
    named = env.daemon_setting() is not None  # KILN_DAEMON names it: a job counts on it answering
    if address.startswith("unix:") and not launch.listening(address[len("unix:"):]):
        return _silent_daemon(address, "not running", named)
    try:
        with Client(address, token=env.daemon_token() or launch.own_token(address), tls_ca=env.daemon_tls_ca()) as c:
            s = c.stats(timeout=10)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:
            return _check("daemon", FAIL, f"{address} refuses this token",
                          "set KILN_DAEMON_TOKEN to the daemon's token")
        return _silent_daemon(address, e.code().name, named)
    import kiln
    detail = f"{address}: kiln {s.version}, {s.workers} workers, up {s.uptime_s:.0f} s"
    if s.version != kiln.__version__:
        return _check("daemon", WARN, f"{detail}; this is kiln {kiln.__version__}: their kernels' keys differ",
                      "restart it on this kiln (kiln daemon stop; the next compile starts one)")
    return _check("daemon", OK, detail)


def _silent_daemon(address: str, why: str, named: bool) -> dict:
    if named:
        return _check("daemon", FAIL, f"KILN_DAEMON={address} does not answer ({why}): each process compiles "
                      "for itself",
                      "start it (kiln daemon start --listen HOST:PORT there), or unset KILN_DAEMON for the node daemon")
    return _check("daemon", WARN, f"none answers at {address} ({why}): the first compile starts one",
                  "kiln daemon start (starts it now, so that the first compile does not wait)")


def check_shared_tier() -> dict:
    from kiln.cache import env, remote
    url = env.remote_cache_url()
    if url is None:
        return _check("shared tier", OK, "off (KILN_REMOTE_CACHE unset): each node compiles for itself")
    try:
        tier = remote.from_env()
    except ValueError as e:  # no cluster key, a key file others can read, a bad URL
        return _check("shared tier", FAIL, f"{remote.redacted(url)}: {e}",
                      "fix the cluster key (KILN_REMOTE_CACHE_KEY or _FILE), or unset KILN_REMOTE_CACHE")
    try:
        probe = tier.probe()
    finally:
        tier.close()
    if not probe["reachable"]:
        return _check("shared tier", FAIL, f"{tier.where} not reachable: {probe['error']}",
                      "start Redis there, or fix KILN_REMOTE_CACHE (unset, compiles stay on the node)")
    detail = f"{tier.where}: Redis answers in {probe['ping_ms']:.1f} ms, {probe['keys']} keys"
    if probe["maxmemory_policy"] != "allkeys-lru" or not probe["maxmemory_bytes"]:
        return _check("shared tier", WARN, f"{detail}; policy {probe['maxmemory_policy']}, maxmemory "
                      f"{probe['maxmemory_bytes'] or 'none'}: it fills up and then refuses writes",
                      "redis-cli config set maxmemory 8gb; redis-cli config set maxmemory-policy allkeys-lru")
    return _check("shared tier", OK, detail)


def _foreach_args(graphs: bool, daemon: str, environ: dict) -> str:
    from kiln.cache import env
    try:
        limit = env.foreach_args(environ)
    except ValueError as e:
        return f"not understood ({e})"
    return str(limit) if graphs and daemon != "off" and limit is not None else "PyTorch's own"


def check_sharing(environ: dict) -> dict:
    """Which sharing paths this environment turns on."""
    from kiln.cache import env
    try:
        dropin = hook.requested(environ)
    except ValueError as e:
        return _check("sharing", FAIL, str(e), f"export {hook.ENV}=1 (or 0)")
    graphs = hook.share_graphs(environ)
    daemon = env.daemon_setting(environ) or "the node daemon"
    ahead_on = graphs and env.backward_ahead(environ)
    paths_on = [f"{hook.ENV} {'on' if dropin else 'off'}",
                f"KILN_SHARE_GRAPHS {'on' if graphs else 'off'}" + ("" if dropin else " (with the drop-in only)"),
                f"KILN_BACKWARD_AHEAD {'on' if ahead_on else 'off'}",
                f"KILN_FOLLOWERS_TRACE {'on' if ahead_on and env.followers_trace(environ) else 'off'}",
                f"KILN_AUTOTUNE_ONCE {'on' if graphs and env.autotune_once(environ) else 'off'}",
                f"KILN_DEFER_FULL_GC {'on' if graphs and env.defer_full_gc(environ) else 'off'}",
                f"KILN_BRIEF_GUARD_TEXT {'on' if graphs and env.brief_guard_text(environ) else 'off'}",
                f"KILN_SHARE_TORCH_KEY {'on' if graphs and env.share_torch_key(environ) else 'off'}",
                f"KILN_FOREACH_ARGS {_foreach_args(graphs, daemon, environ)}",
                f"KILN_REMOTE_CACHE {'on' if env.remote_cache_url(environ) else 'off'}",
                f"KILN_DAEMON {daemon}"]
    ahead = _backward_ahead_probe(environ) if dropin and ahead_on else "on"
    if ahead != "on":
        paths_on[2] = f"KILN_BACKWARD_AHEAD on, but {ahead}"
    if dropin and graphs and daemon == "off":
        return _check("sharing", WARN, f"{', '.join(paths_on)}: torch.compile's graphs are read from the node cache, "
                      "but every rank compiles a graph none has stored (single flight needs the daemon)",
                      "unset KILN_DAEMON (the node daemon), or KILN_SHARE_GRAPHS=0")
    if ahead != "on":
        return _check("sharing", WARN, f"{', '.join(paths_on)}: the leader compiles each backward itself, as "
                      "without kiln", "KILN_BACKWARD_AHEAD=0 to silence this; a PyTorch kiln knows takes the hook")
    return _check("sharing", OK, ", ".join(paths_on))


_AHEAD_PROBE = """
import importlib.util
if importlib.util.find_spec("torch") is None:
    print("on")  # nothing to compile ahead without torch
else:
    import torch._functorch._aot_autograd.graph_compile
    from kiln.dropin import backward_ahead
    print(backward_ahead.installed or "not installed: graph_compile was imported without kiln's hook")
"""


def _backward_ahead_probe(environ: dict) -> str:
    """Whether a job's PyTorch takes the backward-ahead hook ("on"), or why not (its AOTAutograd
    differs, ...): asked of a fresh interpreter with the job's environment, as the probe above."""
    try:
        probe = subprocess.run([sys.executable, "-c", _AHEAD_PROBE], env=environ, capture_output=True, text=True,
                               timeout=300)
    except subprocess.TimeoutExpired:
        return "importing PyTorch took over 300 s"
    lines = probe.stdout.strip().splitlines()
    return lines[-1] if probe.returncode == 0 and lines else f"the probe failed: {probe.stderr.strip()[-300:]}"


def dropin_check(r: dict) -> dict:
    """`report()` as a check: broken when KILN_DROPIN asks for kiln and `import triton` is not kiln."""
    try:
        asked = hook.requested({hook.ENV: r["KILN_DROPIN"] or ""})
    except ValueError:
        asked = False  # check_sharing reports the value
    if asked and r["import_triton"] != "kiln":
        return _check("drop-in", FAIL, r["why"], "reinstall kiln (pip install -e . in a checkout)")
    return _check("drop-in", OK, f"import triton -> {r['import_triton']} ({hook.ENV} {'on' if asked else 'off'})")


def format_checks(checks: list[dict]) -> str:
    lines = []
    for c in checks:
        lines.append(f"{c['status']:4}  {c['name']}: {c['detail']}")
        if c["fix"] and c["status"] != OK:
            lines.append(f"      fix: {c['fix']}")
    broken = sum(c["status"] == FAIL for c in checks)
    warned = sum(c["status"] == WARN for c in checks)
    lines.append(f"{broken} broken, {warned} {'warning' if warned == 1 else 'warnings'}" if broken or warned
                 else "all well")
    return "\n".join(lines)


def torchrun_advice(command: list[str], environ: dict) -> str | None:
    """For `kiln run -- torchrun ...` with several ranks: torchrun puts rank i on cuda:i unless told
    `--virtual-local-rank`, and PyTorch's graph keys hold the device index, so the node's ranks
    would share kiln's kernels but each compile its own graphs. None when that does not apply."""
    launcher = os.path.basename(command[0]) if command else ""
    args = command[1:]
    if launcher.startswith("python") and args[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
        args = args[2:]
    elif launcher != "torchrun":
        return None
    if not hook.share_graphs(environ) or {"--virtual-local-rank", "--virtual_local_rank"} & set(args):
        return None
    if _nproc_per_node(args) in ("1", None) or not _torchrun_has_virtual_local_rank():
        return None
    return ("kiln run: torchrun puts rank i on cuda:i, and PyTorch's graph keys hold the device index: the ranks "
            "will share kiln's kernels but each compile its own graphs. Add --virtual-local-rank (every rank's "
            "GPU is then cuda:0) and the node compiles each graph once.")


def _nproc_per_node(args: list[str]) -> str | None:
    """torchrun's --nproc-per-node (either spelling, `=` or a separate value), up to the script."""
    for i, arg in enumerate(args):
        if arg.endswith(".py") or arg in ("-m", "--module", "--"):
            return None  # the training script: what follows is its own
        for flag in ("--nproc-per-node", "--nproc_per_node"):
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def _torchrun_has_virtual_local_rank() -> bool:
    """Whether the installed PyTorch's torchrun has --virtual-local-rank (added late in 2025), read
    from its source without importing torch (seconds, for a launcher)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    for directory in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(directory, "distributed", "run.py"), encoding="utf-8") as f:
                return "--virtual-local-rank" in f.read()
        except OSError:
            continue
    return False
