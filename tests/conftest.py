"""Test-wide setup: kernels in these tests run in kiln's NumPy interpreter."""
import os

import tempfile

os.environ.setdefault("KILN_INTERPRET", "1")
# Compiled kernels go to a cache of the test run's own, never the user's ~/.cache/kiln.
os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-test-cache-")
