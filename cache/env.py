"""The environment variables that the cache and the compile service read, all in one place.

    KILN_CACHE_DIR      the node cache's directory (default ~/.cache/kiln)
    KILN_CACHE_SIZE     its size limit: bytes, or with a K/M/G/T suffix (default 8G)
    KILN_CACHE_SHARED   1: the cache is shared by a group (made 2770, files 0660); else 0700
    KILN_DAEMON         the daemon to use: unix:/path or host:port; "off" for none; unset
                        for the node daemon on its default socket
    KILN_DAEMON_TOKEN   the token a daemon listening on TCP demands, and clients present
    KILN_DAEMON_TLS_CA  a PEM file of the CA that signed a TCP daemon's certificate: clients
                        then speak TLS to it and verify it
    KILN_MANIFEST       a file to which every kernel a run uses is appended (for `kiln prewarm`)
    KILN_REMOTE_CACHE   the shared tier: redis://[user:pass@]host:port/db, or rediss:// for TLS;
                        unset: none
    KILN_SHARE_GRAPHS   (read by kiln.dropin.hook, which imports no kiln) under the drop-in: 1 (default) serves torch.compile's FX graph, AOTAutograd
                        and autotuning caches from the node cache with single flight through the
                        daemon, and compiles Inductor's kernels on the daemon's pool; 0: off
    KILN_GRAPH_WAIT_S   how long a rank waits for another's graph before compiling it itself
                        (default 600)
    XDG_RUNTIME_DIR     where the node daemon's socket lives (else the cache directory)
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SIZE_LIMIT = 8 << 30
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def cache_dir() -> Path:
    return Path(os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")


def cache_shared() -> bool:
    return os.environ.get("KILN_CACHE_SHARED", "").strip().lower() in ("1", "true", "yes", "on")


def cache_size_limit() -> int:
    text = os.environ.get("KILN_CACHE_SIZE", "").strip()
    return parse_size(text) if text else DEFAULT_SIZE_LIMIT


def daemon_setting() -> str | None:
    """KILN_DAEMON as given: None when unset (use the node daemon), "off", or an address."""
    value = os.environ.get("KILN_DAEMON", "").strip()
    return value or None


def daemon_token() -> str | None:
    return os.environ.get("KILN_DAEMON_TOKEN") or None


def daemon_tls_ca() -> Path | None:
    value = os.environ.get("KILN_DAEMON_TLS_CA", "").strip()
    return Path(value) if value else None


def remote_cache_url() -> str | None:
    return os.environ.get("KILN_REMOTE_CACHE", "").strip() or None


def graph_wait_seconds() -> float:
    text = os.environ.get("KILN_GRAPH_WAIT_S", "").strip()
    try:
        return max(0.0, float(text)) if text else 600.0
    except ValueError:
        raise ValueError(f"KILN_GRAPH_WAIT_S={text!r}: a number of seconds") from None


def manifest_path() -> Path | None:
    value = os.environ.get("KILN_MANIFEST", "").strip()
    return Path(value) if value else None


def runtime_dir() -> Path:
    """Where the node daemon keeps its socket, pid file and log: this user's alone, also
    when the cache is shared."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base:
        return Path(base) / "kiln"
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
