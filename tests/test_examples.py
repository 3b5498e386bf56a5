"""The example kernels in examples/ run unchanged in the interpreter and match NumPy."""
import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


@pytest.mark.parametrize("name", ["vector_add", "fused_softmax", "matmul", "dropout", "layer_norm", "fused_attention"])
def test_example_matches_numpy(name):
    importlib.import_module(name).main()
