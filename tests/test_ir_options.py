"""kiln.ir.options: one record of the compile options, which codegen, the daemon's request check, the
node cache's metadata check and the frontend's launch defaults all follow."""
import pytest

from kiln.cache import metadata
from kiln.codegen import compiler
from kiln.config import DEFAULT_NUM_STAGES, DEFAULT_NUM_WARPS
from kiln.daemon import service
from kiln.ir import options
from kiln.proto.convert import ConversionError


def test_every_layer_takes_its_defaults_from_the_record():
    assert compiler.DEFAULT_OPTIONS == {"num_warps": DEFAULT_NUM_WARPS, "num_stages": DEFAULT_NUM_STAGES} == \
        {"num_warps": 4, "num_stages": 3}
    assert metadata.DEFAULT_NUM_WARPS == options.DEFAULT_NUM_WARPS
    assert set(compiler.OPTIONAL_OPTIONS) == {"maxnreg", "enable_fp_fusion", "enable_reflect_ftz", "line_info"}
    assert compiler._options(None) == {"num_warps": 4, "num_stages": 3}


def _bounds(name):
    low, high = options.RANGES[name]
    values = {low - 1, low, high, high + 1}
    if name == "num_warps":
        values |= {3, 6, 8}
    return sorted(values)


@pytest.mark.parametrize("name", ["num_warps", "maxnreg", "enable_fp_fusion", "enable_reflect_ftz", "line_info"])
def test_codegen_and_the_daemon_accept_the_same_values(name):
    for value in _bounds(name):
        try:
            compiler._options({name: value})
            codegen_ok = True
        except compiler.CompileError:
            codegen_ok = False
        try:
            service._checked_options({name: value})
            daemon_ok = True
        except ConversionError:
            daemon_ok = False
        assert codegen_ok == daemon_ok == options.in_range(name, value), (name, value)


def test_the_daemon_checks_the_options_codegen_does_not_read():
    with pytest.raises(ConversionError, match="num_ctas"):
        service._checked_options({"num_ctas": 17})
    assert service._checked_options({"num_ctas": 2, "num_stages": 16}) == {"num_ctas": 2, "num_stages": 16}
    with pytest.raises(ConversionError, match="num_stages"):
        service._checked_options({"num_stages": 17})
