"""`kiln.tools`: host-side helpers that kernels take as arguments (Triton's `triton.tools`), `LinearLayout`
(Triton's layouts as maps over GF(2)), and the ahead-of-time `compile` and `link` to C."""
from .linear_layout import LinearLayout  # noqa: F401  (triton.tools.LinearLayout)
