"""`tl.target_info`: what a kernel may ask, at compile time, of the GPU it is built for (Triton's
module of the same name). With no GPU (the interpreter) there is no target: `current_target()`
is None and every question answers False, so guarded code takes its portable path."""
from kiln.jit import constexpr_function

__all__ = ["current_target"]


def current_target():
    """The active GPU's target (backend "cuda", arch 90 for sm_90), or None without one."""
    from kiln.runtime import driver
    try:
        return driver.active.get_current_target()
    except Exception:  # no driver, no GPU (KILN_INTERPRET=1 on a machine without one)
        return None


@constexpr_function
def is_cuda():
    target = current_target()
    return target is not None and target.backend == "cuda"


@constexpr_function
def cuda_capability_geq(major, minor=0):
    """Whether the target's compute capability is at least (major, minor), as a constexpr bool."""
    target = current_target()
    if target is None or target.backend != "cuda":
        return False
    return target.arch >= major * 10 + minor


@constexpr_function
def is_hip():
    target = current_target()
    return target is not None and target.backend == "hip"


@constexpr_function
def is_hip_cdna3():
    return False  # kiln builds for NVIDIA GPUs only


@constexpr_function
def is_hip_cdna4():
    return False
