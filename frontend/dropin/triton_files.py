"""A kiln cubin in Triton's cache layout, where PyTorch Inductor looks for it.

After `triton.compile`, Inductor launches a kernel with its own launcher (no Python launcher of
the compiler's) when `$TRITON_CACHE_DIR/<key>/<name>.cubin` exists, `<key>` being the kernel's
hash as Triton's cache spells it (`file_cache._base32`); its Triton bundler then copies that
directory into the FX graph cache, and a warm run restores it and launches the kernel with no
compile at all. So `publish` writes that directory as Triton's own cache manager would — the
cubin, `<name>.json` (the metadata) and `__grp__<name>.json` (the group naming them) — but only
for a kernel that kiln.dropin.static_abi finds the launcher would launch exactly as kiln does;
for any other it removes a cubin left at that path, and Inductor uses kiln's launcher.

Each file is written whole (a temporary file, then a rename) and only when its bytes differ
from what is there; files already there are compared as bytes, never loaded or run. Nothing
here fails a compile: an error is logged and the kernel keeps kiln's launcher.
"""
from __future__ import annotations

import json
import logging
import os
import uuid

from kiln.cache.env import triton_cache_dir

from . import static_abi
from .file_cache import _base32

log = logging.getLogger("kiln.dropin.triton_files")
_warned = False  # an unwritable directory is said once per process, not once per kernel


def kernel_dir(kernel) -> str | None:
    """The directory Inductor reads for `kernel`, or None when TRITON_CACHE_DIR is unset (Inductor
    sets it, to its per-device directory, before its first compile)."""
    root = triton_cache_dir()
    return os.path.join(root, _base32(kernel.hash)) if root else None


def publish(kernel) -> str | None:
    """Leave `kernel`'s cubin (a CUDA CompiledKernel of kiln.dropin.compile) where Inductor's
    static launcher finds it, if static_abi allows; the directory written, else None."""
    global _warned
    try:
        directory = kernel_dir(kernel)
        if directory is None or kernel.binary is None:
            return None
        name = kernel.src.fn.__name__
        reason = static_abi.refusal(kernel)
        if reason is not None:
            log.debug("kiln: %s keeps kiln's launcher: %s", name, reason)
            _remove(os.path.join(directory, f"{name}.cubin"))
            return None
        _write_layout(directory, name, kernel)
        return directory
    except Exception as e:  # noqa: BLE001  (an unwritable cache costs the static launch, never the compile)
        log.log(logging.DEBUG if _warned else logging.WARNING,
                "kiln: cannot write %s's files for Inductor's static launcher: %s", kernel.name, e)
        _warned = True
        return None


def _write_layout(directory: str, name: str, kernel) -> None:
    os.makedirs(directory, exist_ok=True)
    cubin, meta, group = (os.path.join(directory, f) for f in (f"{name}.cubin", f"{name}.json", f"__grp__{name}.json"))
    _put(meta, json.dumps(_metadata(kernel)).encode())
    _put(group, json.dumps({"child_paths": {f"{name}.cubin": cubin, f"{name}.json": meta}}).encode())
    _put(cubin, bytes(kernel.binary.cubin))  # last: Inductor takes the cubin's presence as the whole directory's


def _metadata(kernel) -> dict:
    """Triton's `<name>.json`: the compile's metadata, as plain JSON."""
    meta = kernel.metadata._asdict()
    target = meta["target"]
    meta["target"] = target if isinstance(target, str) else {
        "backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
    meta["cluster_dims"] = list(meta["cluster_dims"])
    meta["compiler"] = "kiln"
    return meta


def _put(path: str, data: bytes) -> None:
    try:
        with open(path, "rb") as f:
            if f.read(len(data) + 1) == data:
                return
    except OSError:
        pass
    temp = f"{path}.tmp.pid_{os.getpid()}_{uuid.uuid4().hex}"
    try:
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
