"""The launch options and their defaults; the environment is read in kiln.cache.env, whose
switches the frontend asks through the names here."""
from __future__ import annotations

from kiln.cache.env import allow_non_constexpr_globals, debug, interpret, split_k_enabled  # noqa: F401  (config.interpret() on every launch)
from kiln.ir import options

# Keyword arguments of a launch that are options, not kernel arguments.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "enable_reflect_ftz", "debug", "stream",
                  "launch_cooperative_grid", "launch_pdl", "clc", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
                  "extern_libs", "sanitize_overflow", "arch")
DEFAULT_NUM_WARPS = options.DEFAULT_NUM_WARPS
DEFAULT_NUM_STAGES = options.DEFAULT_NUM_STAGES
