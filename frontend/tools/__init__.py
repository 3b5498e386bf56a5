"""`kiln.tools`: host-side helpers that kernels take as arguments (Triton's `triton.tools`)."""
