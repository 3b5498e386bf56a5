"""Test-wide setup: kernels in these tests run in kiln's NumPy interpreter."""
import os

os.environ.setdefault("KILN_INTERPRET", "1")
