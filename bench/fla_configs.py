"""CONFIGS: the configs fla's autotuned kernels are held to, for comparing two libraries' builds of one
config (bench/fla_stand_in.py, bench/fla_profile.py):

    CONFIGS='chunk_fwd_kernel_h:BK=64,BV=64,num_warps=4,num_stages=4;kernel:name=value,...'

A kernel's config is picked where it holds every named value (meta-parameters, num_warps, num_stages)."""
import os


def wanted() -> dict[str, dict[str, int]]:
    """{kernel name: {name: value}} from CONFIGS."""
    picks = {}
    for item in filter(None, os.environ.get("CONFIGS", "").split(";")):
        kernel, _, values = item.partition(":")
        picks[kernel.strip()] = {k.strip(): int(v) for k, v in (kv.split("=") for kv in values.split(","))}
    return picks


def holds(config, want: dict[str, int]) -> bool:
    """Whether an autotuner's config has every value `want` names."""
    values = {**config.all_kwargs(), "num_warps": config.num_warps, "num_stages": config.num_stages}
    return all(values.get(name) == value for name, value in want.items())


def kernel_name(autotuner) -> str:
    return autotuner.base_fn.__name__
