"""An autotuner left with no config after `early_config_prune` raises Triton's AutotunerError
(a TritonError whose text starts "Autotuner error: "), as upstream's runtime/test_autotuner.py expects."""
import pickle

import numpy as np
import pytest

import kiln
import kiln.language as tl
# triton.TritonError under the drop-in; importing the facade itself here would make this process's
# kiln types pickle as triton's for every later test
from kiln.errors import TritonError
from kiln.runtime.errors import AutotunerError


def test_pruning_every_config_is_an_autotuner_error():
    @kiln.autotune(configs=[kiln.Config({"BLOCK": 32}), kiln.Config({"BLOCK": 64})], key=["n"],
                   prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: []})
    @kiln.jit
    def copy(dst, src, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

    src = np.ones(64, np.float32)
    with pytest.raises(TritonError) as caught:
        copy[lambda meta: (1,)](np.empty_like(src), src, 64)
    assert isinstance(caught.value, AutotunerError)
    assert str(caught.value) == ("Autotuner error: No valid autotuner configs after pruning. `early_config_prune` "
                                 "should return at least one config.")
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == str(caught.value)
