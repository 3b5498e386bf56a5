"""Every KILN_ environment variable kiln reads, read here and nowhere else (tests/test_settings_one_place.py).

Two are read before kiln loads, by the `import triton` hook (kiln.dropin.hook, which imports no
kiln): KILN_DROPIN and KILN_SHARE_GRAPHS; Triton's own TRITON_* variables are its knobs'
(kiln.knobs). The rest:

    KILN_INTERPRET      1 (or Triton's TRITON_INTERPRET=1): run kernels in the NumPy interpreter
    KILN_DEBUG          1 (or TRITON_DEBUG=1): keep device_assert checks in compiled kernels
    KILN_ALLOW_NON_CONSTEXPR_GLOBALS  1 (or Triton's TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1): kernels
                        may read plain globals, compiled in with the value they have then
    KILN_TARGET         compile a device's kernels for this older target (sm_80 on a Hopper)
    KILN_SPLIT_K        0: a Hopper launch of a GEMM tile kernel with too few programs to fill the GPU
                        keeps the kernel as written (default 1: each program a cluster sharing its K loop)
    KILN_CACHE_DIR      the node cache's directory (default ~/.cache/kiln)
    KILN_CACHE_SIZE     its size limit: bytes, or with a K/M/G/T suffix (default 8G)
    KILN_CACHE_SHARED   1: the cache is shared by a group (made 2770, files 0660); else 0700
    KILN_DAEMON         the daemon to use: unix:/path or host:port; "off" for none; unset
                        for the node daemon on its default socket
    KILN_DAEMON_TOKEN   the token a daemon listening on TCP demands, and clients present
    KILN_DAEMON_TLS_CA  a PEM file of the CA that signed a TCP daemon's certificate: clients
                        then speak TLS to it and verify it
    KILN_DAEMON_PLAINTEXT_TOKEN  1: send the token to a TCP daemon without TLS, loopback included
                        (by default a client refuses: the token would cross the network in clear,
                        and on loopback reach whoever holds the port; TLS or a Unix socket only)
    KILN_MANIFEST       a file to which every kernel a run uses is appended (for `kiln prewarm`)
    KILN_REMOTE_CACHE   the shared tier: redis://[user:pass@]host:port/db, or rediss:// for TLS;
                        unset: none
    KILN_REMOTE_CACHE_KEY       the cluster key that authenticates the shared tier's entries (a
                        secret the nodes share and Redis never sees; at least 16 characters);
    KILN_REMOTE_CACHE_KEY_FILE  or a file holding it, readable by its owner alone. Without one
                        the shared tier is off
    KILN_SHARE_GRAPHS   (read by kiln.dropin.hook, which imports no kiln) under the drop-in: 1 (default) serves torch.compile's FX graph, AOTAutograd
                        and autotuning caches from the node cache with single flight through the
                        daemon, and compiles Inductor's kernels on the daemon's pool; 0: off
    KILN_BACKWARD_AHEAD under graph sharing: 1 (default) has the first rank to wait for a training
                        graph compile its backward while the leader compiles the forward; 0: off
    KILN_FOLLOWERS_TRACE  with the backward ahead: 1 (default) has every waiting rank trace a
                        training graph itself and take its compiled forward and backward from the
                        node cache (no wait for the leader's backward); 0: they wait for the
                        leader's AOTAutograd entry
    KILN_AUTOTUNE_ONCE  under graph sharing: 1 (default) has the first rank to launch an Inductor
                        kernel tune it on its GPU (its configs timed; under max-autotune, the
                        coordinate descent too) while the node's other ranks wait for its choice
                        (they launch that config); 0: each tunes for itself
    KILN_GRAPH_WAIT_S   how long a rank waits for another's graph before compiling it itself
                        (default 600)
    KILN_FOREACH_ARGS   under graph sharing, with the node daemon: the most arguments of one of
                        Inductor's foreach kernels (default 64; 0: PyTorch's own, 250), so that an
                        optimizer step is several kernels the daemon's workers compile at once
                        instead of one that takes several times as long
    KILN_DEFER_FULL_GC  under graph sharing: 1 (default) keeps the cycle collector's full passes
                        out of Dynamo's frame compiles (the young generations are still collected;
                        the full pass comes after); 0: Python's default, a full pass whenever due
    KILN_BRIEF_GUARD_TEXT  under graph sharing: 1 (default) has Dynamo's identity guards describe a
                        tensor by kind, shape, dtype and device (PyTorch 2.10-2.12 print its values,
                        which waits for the GPU); 0: PyTorch's own text. The guards are the same
    KILN_SHARE_TORCH_KEY  under graph sharing: 1 (default) has a process take PyTorch's torch_key (a hash
                        of its source, part of every cache key) from the node cache when PyTorch's
                        files have the sizes and times they had when it was stored; 0: each hashes them
    KILN_LIBDEVICE      the libdevice.10.bc that kernels' math functions link (default: the first
                        found in the CUDA wheels, a conda environment, the CUDA toolkit or
                        Triton's wheel: kiln.codegen.libdevice.libdevice_path)
    KILN_PTXAS          the standalone ptxas that assembles kernels setting their registers
                        (setmaxnreg; nvJitLink ignores it), or "off" for none (default: Triton's
                        TRITON_PTXAS_PATH, PATH, the CUDA toolkit, the nvcc wheel: kiln.codegen.ptxas)
    KILN_RUNTIME_DIR    where the node daemon keeps its socket, pid file, log and token
                        (default: the cache directory's run/, run-<uid>/ for a shared cache).
                        XDG_RUNTIME_DIR is not read: an ssh shell has it and a batch job may
                        not, and both must find the same daemon

Read here too, as others define them: CONDA_PREFIX, CUDA_HOME and CUDA_PATH (where libdevice and
ptxas may be), PATH and TRITON_PTXAS_PATH (where ptxas may be), LD_LIBRARY_PATH (part of the
toolchain's identity in the compile key), TRITON_CACHE_DIR and TRITON_CACHE_MANAGER (Triton's file
cache, for the drop-in), TRITON_OVERRIDE_ARCH (the target every compile is for, Triton's `sm80`),
TRITON_LIBCUDA_PATH (where the driver library is, for ahead-of-time kernels' C: kiln.tools.cuda_paths).
Triton's own knobs (`triton.knobs`, kiln.dropin.knobs) read their variables themselves, on every
access, as Triton's do; and the drop-in's start-up hook (kiln.dropin.hook) reads KILN_DROPIN and
KILN_SHARE_GRAPHS before kiln can be imported.
This module is otherwise the only one that reads the environment (tests/test_settings_module.py).
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SIZE_LIMIT = 8 << 30
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


# os.environ keeps the variables in `_data` with encoded names and values; assigning through
# os.environ (monkeypatch.setenv, too) updates it.
_RAW_ENVIRON = os.environ._data
_INTERPRET_KEYS = tuple(os.environ.encodekey(k) for k in ("KILN_INTERPRET", "TRITON_INTERPRET"))
_ON_RAW = tuple(os.environ.encodevalue(v) for v in _ON)


def _switch(name: str, default: bool, environ=None) -> bool:
    """A yes/no variable: off by default unless set to 1/true/yes/on, or on by default unless set
    to 0/false/no/off."""
    value = (os.environ if environ is None else environ).get(name, "").strip().lower()
    return value not in _OFF if default else value in _ON


def interpret() -> bool:
    """KILN_INTERPRET=1 (or TRITON_INTERPRET=1). Read on every launch (tests switch it), so it looks
    in os.environ's own dictionary: `os.environ.get` encodes the name and raises KeyError inside for
    a missing variable, which costs a microsecond or two of every launch."""
    raw = _RAW_ENVIRON.get
    value = raw(_INTERPRET_KEYS[0]) or raw(_INTERPRET_KEYS[1])
    return value is not None and value.strip().lower() in _ON_RAW


def debug() -> bool:
    return _switch("KILN_DEBUG", False) or _switch("TRITON_DEBUG", False)


def split_k_enabled(default: bool) -> bool:
    """Whether launches with too few programs to fill the GPU take a GEMM's split-K build
    (kiln.codegen.passes.split_k): KILN_SPLIT_K=1 or 0 says so for every kernel; unset, `default`
    (on for kernels of kiln's JIT, off for those of `triton.compile` under the drop-in, Inductor's:
    see kiln.dropin.backends)."""
    return _switch("KILN_SPLIT_K", default)


def allow_non_constexpr_globals() -> bool:
    return _switch("KILN_ALLOW_NON_CONSTEXPR_GLOBALS", False) or _switch("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", False)


def forced_target() -> str | None:
    return os.environ.get("KILN_TARGET", "").strip() or None


def override_arch() -> str | None:
    """Triton's TRITON_OVERRIDE_ARCH (`sm80`; knobs.runtime.override_arch): kiln.codegen.target.arch_target."""
    return os.environ.get("TRITON_OVERRIDE_ARCH", "").strip() or None


def cache_dir() -> Path:
    return Path(os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")


def cache_shared() -> bool:
    return _switch("KILN_CACHE_SHARED", False)


def cache_size_limit() -> int:
    text = os.environ.get("KILN_CACHE_SIZE", "").strip()
    return parse_size(text) if text else DEFAULT_SIZE_LIMIT


def daemon_setting(environ=None) -> str | None:
    """KILN_DAEMON as given: None when unset (use the node daemon), "off", or an address."""
    value = (os.environ if environ is None else environ).get("KILN_DAEMON", "").strip()
    return value or None


def daemon_token() -> str | None:
    return os.environ.get("KILN_DAEMON_TOKEN") or None


def daemon_plaintext_token_ok() -> bool:
    return _switch("KILN_DAEMON_PLAINTEXT_TOKEN", False)


def daemon_tls_ca() -> Path | None:
    value = os.environ.get("KILN_DAEMON_TLS_CA", "").strip()
    return Path(value) if value else None


def remote_cache_url(environ=None) -> str | None:
    return (os.environ if environ is None else environ).get("KILN_REMOTE_CACHE", "").strip() or None


def backward_ahead(environ=os.environ) -> bool:
    return _switch("KILN_BACKWARD_AHEAD", True, environ)


def followers_trace(environ=os.environ) -> bool:
    return _switch("KILN_FOLLOWERS_TRACE", True, environ)


def autotune_once(environ=os.environ) -> bool:
    return _switch("KILN_AUTOTUNE_ONCE", True, environ)


def foreach_args(environ=os.environ) -> int | None:
    """KILN_FOREACH_ARGS (default 64), None for PyTorch's own limit (0)."""
    text = environ.get("KILN_FOREACH_ARGS", "").strip() or "64"
    if not text.isdigit():
        raise ValueError(f"KILN_FOREACH_ARGS={text!r}: expected a number of arguments (0: PyTorch's own)")
    return int(text) or None


def defer_full_gc(environ=os.environ) -> bool:
    return _switch("KILN_DEFER_FULL_GC", True, environ)


def brief_guard_text(environ=os.environ) -> bool:
    return _switch("KILN_BRIEF_GUARD_TEXT", True, environ)


def share_torch_key(environ=os.environ) -> bool:
    return _switch("KILN_SHARE_TORCH_KEY", True, environ)


def graph_wait_seconds() -> float:
    text = os.environ.get("KILN_GRAPH_WAIT_S", "").strip()
    try:
        return max(0.0, float(text)) if text else 600.0
    except ValueError:
        raise ValueError(f"KILN_GRAPH_WAIT_S={text!r}: a number of seconds") from None


MIN_CLUSTER_KEY_CHARS = 16


def remote_cache_key() -> bytes | None:
    """The cluster key: KILN_REMOTE_CACHE_KEY, or the contents of KILN_REMOTE_CACHE_KEY_FILE; None if
    neither is set. A key too short to guess hard, or a file others may read, is a ValueError."""
    value = os.environ.get("KILN_REMOTE_CACHE_KEY", "").strip()
    path = os.environ.get("KILN_REMOTE_CACHE_KEY_FILE", "").strip()
    if not value and path:
        try:
            if os.stat(path).st_mode & 0o077:
                raise ValueError(f"KILN_REMOTE_CACHE_KEY_FILE={path} may be read by others: chmod 600 it")
            value = Path(path).read_text().strip()
        except OSError as e:
            raise ValueError(f"KILN_REMOTE_CACHE_KEY_FILE={path}: {e.strerror}") from None
    if not value:
        return None
    if len(value) < MIN_CLUSTER_KEY_CHARS:
        raise ValueError(f"the cluster key has {len(value)} characters; use at least {MIN_CLUSTER_KEY_CHARS} "
                         "(e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
    return value.encode()


def manifest_path() -> Path | None:
    value = os.environ.get("KILN_MANIFEST", "").strip()
    return Path(value) if value else None


def libdevice_setting() -> Path | None:
    value = os.environ.get("KILN_LIBDEVICE", "").strip()
    return Path(value).expanduser() if value else None


UNDER_SANITIZER = "KILN_UNDER_SANITIZER"  # set for the run kiln.testing.cuda_memcheck starts under compute-sanitizer


def under_sanitizer() -> bool:
    """Is this the run `cuda_memcheck` started under compute-sanitizer (so it starts no other)?"""
    return bool(os.environ.get(UNDER_SANITIZER))


def environment() -> dict[str, str]:
    """A copy of this process's environment: what a child process it starts inherits, and what a
    report of the settings (`kiln doctor`) reads."""
    return dict(os.environ)


def toolkit_environ() -> dict[str, str]:
    """CONDA_PREFIX, CUDA_HOME and CUDA_PATH, where set: where a CUDA toolkit's files may be."""
    return {k: os.environ[k] for k in ("CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH") if os.environ.get(k)}


def ptxas_setting() -> str | None:
    """KILN_PTXAS: a ptxas's path, "off" for none, or None (unset: look for one)."""
    return os.environ.get("KILN_PTXAS", "").strip() or None


def ptxas_search() -> tuple[str, str]:
    """(TRITON_PTXAS_PATH, PATH): where a ptxas may be, as Triton's knob and the shell say."""
    return os.environ.get("TRITON_PTXAS_PATH", ""), os.environ.get("PATH", "")


def library_path() -> str:
    """LD_LIBRARY_PATH: it decides which shared libraries (nvJitLink) a process loads."""
    return os.environ.get("LD_LIBRARY_PATH", "")


def triton_libcuda_path() -> str | None:
    """TRITON_LIBCUDA_PATH as set: Triton's folder of libcuda.so, first where a C compiler links it."""
    return os.environ.get("TRITON_LIBCUDA_PATH") or None


def triton_cache_dir() -> str | None:
    """TRITON_CACHE_DIR as set: Inductor sets it to its per-device folder before its first compile,
    and reads cubins there in Triton's layout (kiln.dropin.triton_files)."""
    return os.environ.get("TRITON_CACHE_DIR") or None


def triton_cache_manager() -> str | None:
    """TRITON_CACHE_MANAGER ("module:Class"): a file cache manager in place of Triton's."""
    return os.environ.get("TRITON_CACHE_MANAGER") or None


def triton_knob_set(name: str) -> bool:
    """Is Triton's knob variable `name` set at all? A compile asks before it imports the knobs for a
    value only they give (kiln.dropin.knobs reads TRITON_KERNEL_DUMP, TRITON_ALWAYS_COMPILE, ...)."""
    return name in os.environ


def runtime_dir() -> Path:
    """Where the node daemon keeps its socket, pid file and log: this user's alone, also
    when the cache is shared. The same in every shell and job of the user's that shares
    the cache directory, so that `kiln daemon status` sees the daemon the job started."""
    explicit = os.environ.get("KILN_RUNTIME_DIR", "").strip()
    if explicit:
        return Path(explicit)
    return cache_dir() / (f"run-{os.geteuid()}" if cache_shared() else "run")


def parse_size(text: str) -> int:
    """`"512M"` -> 536870912; a plain number is bytes."""
    number, suffix = text.rstrip("bB").upper(), ""
    if number and number[-1] in _SUFFIXES:
        number, suffix = number[:-1], number[-1]
    try:
        return int(float(number) * _SUFFIXES[suffix])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M, G or T)") from None
