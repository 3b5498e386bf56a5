"""Running the interpreter on CUDA tensors: through host copies of their whole storage.

KILN_INTERPRET=1 on a GPU machine is a debugging aid; the kernel's arguments are often
CUDA tensors. Each is replaced for the run by a CPU tensor over a host copy of its entire
storage (same offset and strides, so pointer arithmetic past the view's own elements still
lands where it would on the device), and the storage is copied back afterwards.
"""
from __future__ import annotations


def _is_cuda_tensor(arg) -> bool:
    return getattr(arg, "is_cuda", False) is True and hasattr(arg, "untyped_storage")


def run_on_host(run, args):
    """Call run(host_args) with CUDA tensors swapped for host views, then write them back."""
    if not any(_is_cuda_tensor(a) for a in args):
        return run(args)
    import torch
    host_args, storages = [], {}
    for arg in args:
        if not _is_cuda_tensor(arg):
            host_args.append(arg)
            continue
        device_storage = arg.untyped_storage()
        key = device_storage.data_ptr()
        if key not in storages:  # tensors sharing a storage share its host copy
            storages[key] = (device_storage, device_storage.cpu())
        host_storage = storages[key][1]
        view = torch.empty(0, dtype=arg.dtype).set_(host_storage, arg.storage_offset(), arg.size(), arg.stride())
        host_args.append(view)
    try:
        return run(host_args)
    finally:
        for device_storage, host_storage in storages.values():
            device_storage.copy_(host_storage)
