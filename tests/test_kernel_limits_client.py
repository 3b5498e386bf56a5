"""A kernel the daemon would refuse as too large is refused by the client too, at once: it is
never compiled in the process instead (where a block of 2^21 elements or 100,000 unrolled steps
takes minutes and gigabytes)."""
import pytest

from kiln.daemon import tiers
from kiln.ir import parse_function

HUGE_BLOCK = """
kernel @huge(%x: ptr<fp32>) {
  %r = arange {end = 2097152, start = 0} : <2097152xint32>
  return
}
"""


def never(fn, target, options):
    raise AssertionError("compiled in this process")


def test_a_kernel_over_the_limits_is_an_error_not_a_local_compile(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KILN_DAEMON", "off")
    monkeypatch.setattr(tiers, "_state", tiers._State())
    with pytest.raises(tiers.KernelTooLarge, match="more than 1048576 elements"):
        tiers.cached_compile(parse_function(HUGE_BLOCK), "sm_90a", {"num_warps": 4}, compile_fn=never)
