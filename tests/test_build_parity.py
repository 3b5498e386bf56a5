"""scripts/build_parity.py on the CPU tier: a suite's launches recorded under the drop-in's interpreter
(built, not run), each specialization built by kiln for sm_90a, and the report's comparison of CTAs per
SM. Triton's side needs a Python where `import triton` is Triton: not here."""
import json
import os
import subprocess
import sys
import textwrap

from repo_scripts import SCRIPTS, load

SCRIPT = SCRIPTS / "build_parity.py"

SUITE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def test_scale():
    x = torch.arange(100, dtype=torch.float16)
    out = torch.empty_like(x)
    scale_rows[(4,)](x, out, 100, BLOCK=32)
    scale_rows[(2,)](x.float(), out.float(), 100, BLOCK=64)
    assert torch.equal(out, x * 2)  # fails: the recorder builds launches and runs none
'''



def _recorded(tmp_path, suite: str, count: int):
    """The file `record` writes for the test file `suite` (checked to hold `count` specializations)."""
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(suite))
    specs = tmp_path / "specs.jsonl"
    out = subprocess.run([sys.executable, str(SCRIPT), "record", "--out", str(specs), "--",
                          str(tmp_path / "test_suite.py")], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert f"{count} specializations recorded" in out.stdout, out.stdout + out.stderr
    return specs


def test_a_suites_launches_are_recorded_built_and_compared(tmp_path):
    specs, ours = _recorded(tmp_path, SUITE, 2), tmp_path / "kiln.jsonl"
    recs = [json.loads(line) for line in specs.read_text().splitlines()]
    assert {r["call"]["args"]["x_ptr"]["tensor"] for r in recs} == {"torch.float16", "torch.float32"}
    assert all(r["call"]["qualname"] == "scale_rows" and "kernel @scale_rows" in r["kir"] for r in recs)
    assert sorted(r["call"]["args"]["BLOCK"]["value"] for r in recs) == [32, 64]

    subprocess.run([sys.executable, str(SCRIPT), "kiln", str(specs), str(ours)], check=True, timeout=300)
    built = [json.loads(line) for line in ours.read_text().splitlines()]
    assert [b["status"] for b in built] == ["ok", "ok"] and all(b["result"]["regs"] > 0 for b in built)

    # a Triton side that needs twice the registers and all of the shared memory for the first build
    theirs = tmp_path / "triton.jsonl"
    rows = [{**b, "result": {"regs": b["result"]["regs"], "stack": 0, "shared": b["result"]["shared"],
                             "threads": b["result"]["threads"]}} for b in built]
    rows[0]["result"]["shared"] = 200 * 1024
    theirs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = load("build_parity").report(str(ours), str(theirs))
    assert table.startswith("2 builds compared: kiln's holds fewer CTAs per SM than Triton's in 0, as many in 1, "
                            "more in 1")


DESCRIPTOR_SUITE = '''
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def copy_tile(x_desc, out_ptr, BLOCK: tl.constexpr):
    tile = x_desc.load([0, 0])
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs[:, None] * BLOCK + offs[None, :], tile)


def test_copy():
    x = torch.arange(64 * 48, dtype=torch.float16).reshape(64, 48)
    out = torch.empty(32, 32, dtype=torch.float16)
    copy_tile[(1,)](TensorDescriptor(x, [64, 40], [48, 1], [32, 32]), out, BLOCK=32)
'''

REBUILD = '''
import json, sys
sys.path.insert(0, {scripts!r})
import torch
import build_parity
from triton.tools.tensor_descriptor import TensorDescriptor
desc = build_parity._rebuilt(json.loads(sys.argv[1]), torch)
assert isinstance(desc, TensorDescriptor), type(desc)
assert (desc.shape, desc.strides, desc.block_shape) == ([64, 40], [48, 1], [32, 32]), desc
assert (desc.base.dtype, tuple(desc.base.shape), desc.base.stride()) == (torch.float16, (64, 48), (48, 1))
print("rebuilt")
'''


def test_a_host_descriptor_argument_is_recorded_and_rebuilt(tmp_path):
    arg = json.loads(_recorded(tmp_path, DESCRIPTOR_SUITE, 1).read_text())["call"]["args"]["x_desc"]
    assert arg == {"descriptor": {"base": {"tensor": "torch.float16", "shape": [64, 48], "stride": [48, 1],
                                           "align16": True},
                                  "shape": [64, 40], "strides": [48, 1], "block_shape": [32, 32], "padding": "zero"}}
    # rebuilt over a stand-in base, in a Python where `triton` answers (here the drop-in's)
    rebuilt = subprocess.run([sys.executable, "-c", REBUILD.format(scripts=str(SCRIPTS)), json.dumps(arg)],
                             capture_output=True, text=True, timeout=300, env={**os.environ, "KILN_DROPIN": "1"})
    assert rebuilt.stdout.strip() == "rebuilt", rebuilt.stdout + rebuilt.stderr


def test_changes_lists_the_builds_a_change_moved(tmp_path):
    """Two of kiln's runs over the same specializations: only the builds whose registers, spills, shared
    memory or status differ, with their CTAs per SM."""
    def build(digest, regs, shared, status="ok"):
        return {"hash": digest, "kernel": f"k{digest}", "opts": {"num_warps": 4}, "status": status,
                "result": {"regs": regs, "spills": 0, "shared": shared, "threads": 128, "seconds": 0.1}}
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    before.write_text("".join(json.dumps(b) + "\n" for b in
                              (build("a", 64, 8448), build("b", 32, 0), build("c", 40, 0), build("d", 40, 0))))
    after.write_text("".join(json.dumps(b) + "\n" for b in
                             (build("a", 64, 4096), {**build("b", 32, 0), "result": {**build("b", 32, 0)["result"],
                                                                                     "seconds": 9.0}},
                              build("c", 0, 0, status="error"))))
    table = load("build_parity").changes(str(before), str(after))
    assert table.startswith("3 builds in both runs: 2 changed.")
    assert "| ka | {\"num_warps\": 4} | 64 / 0 / 8448 | 64 / 0 / 4096 |" in table
    assert "| kc | {\"num_warps\": 4} | 40 / 0 / 0 | error | " in table and "/ - |" in table and "kb" not in table


def test_source_lays_out_a_commits_kiln_for_pythonpath(tmp_path):
    """`source REV DIR`: the packages of this repository at REV, as pyproject.toml's package-dir maps them."""
    import pytest
    pytest.importorskip("tomllib")  # (Python 3.11 on)
    repo = SCRIPTS.parent
    if subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    load("build_parity").source("HEAD", str(tmp_path))
    for module in ("__init__.py", "language/__init__.py", "ir/__init__.py", "codegen/passes/layouts.py"):
        assert (tmp_path / "kiln" / module).is_file()
    found = subprocess.run([sys.executable, "-c", "import kiln.codegen.passes.layouts as m; print(m.__file__)"],
                           capture_output=True, text=True, cwd=str(tmp_path),
                           env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert found.stdout.strip().startswith(str(tmp_path)), found.stderr[-500:]
