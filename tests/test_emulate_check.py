"""scripts/emulate_check.py on the CPU tier: a suite's launches under the drop-in's interpreter, each also
run as kiln builds it on the CPU emulator from a copy of its arguments, and the two results compared
(a large grid: a sample of its programs, compared where they wrote)."""
import json
import subprocess
import sys
import textwrap

import pytest

from repo_scripts import SCRIPTS, load

torch = pytest.importorskip("torch")

SCRIPT = SCRIPTS / "emulate_check.py"

SUITE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scaled_rows(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * 2 + tl.sum(x, 0), mask=offs < n)


def test_rows():
    x = torch.arange(100, dtype=torch.float32) / 7
    out = torch.empty_like(x)
    scaled_rows[(4,)](x, out, 100, BLOCK=32)
    many = torch.arange(2000, dtype=torch.float32) / 3
    out_many = torch.empty_like(many)
    scaled_rows[(63,)](many, out_many, 2000, BLOCK=32)  # 63 programs: a sample of them emulated
    assert torch.allclose(out[:32], x[:32] * 2 + x[:32].sum())


@triton.jit
def shift_rows(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)


@triton.jit
def column_sums(x_ptr, sums_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(sums_ptr + offs, tl.load(x_ptr + tl.program_id(0) * BLOCK + offs))


def test_in_place_and_atomics():
    memory = torch.zeros(96)
    shift_rows[(2,)](memory[:64], memory[32:], BLOCK=32)  # program 1 reads what program 0 stored
    assert memory[64:].eq(2).all()
    x = torch.arange(20 * 32, dtype=torch.float32).reshape(20, 32)
    sums = torch.zeros(32)
    column_sums[(20,)](x, sums, BLOCK=32)  # 20 programs adding into one row: all of them emulated
    assert torch.equal(sums, x.sum(0))


@triton.jit
def doubled_batches(x_desc, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    x = x_desc.load([tl.program_id(0), 0, 0]).reshape(BM, BN)
    tl.store(out_ptr + tl.program_id(0) * BM * BN + rows, x * 2)


def test_a_batched_host_descriptor():
    from triton.tools.tensor_descriptor import TensorDescriptor
    x = torch.arange(3 * 8 * 16, dtype=torch.float32).reshape(3, 8, 16)
    out = torch.empty_like(x)
    doubled_batches[(3,)](TensorDescriptor.from_tensor(x, [1, 8, 16]), out, BM=8, BN=16)
    assert torch.equal(out, x * 2)


@triton.jit
def row_addresses(x_ptr, addresses_ptr, ROW: tl.constexpr):
    tl.store(addresses_ptr + tl.program_id(0), x_ptr + tl.program_id(0) * ROW)


def test_stored_addresses():
    x = torch.zeros(4, 8)
    addresses = torch.empty(4, dtype=torch.int64)
    row_addresses[(4,)](x, addresses, ROW=8)  # (flashinfer's grouped-GEMM arguments store such addresses)
    assert addresses.tolist() == [x.data_ptr() + 32 * row for row in range(4)]
'''



def test_a_suites_launches_run_on_the_emulator_and_agree(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    rows_path = tmp_path / "rows.jsonl"
    out = subprocess.run([sys.executable, str(SCRIPT), "run", "--out", str(rows_path), "--",
                          str(tmp_path / "test_suite.py")], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert "4 passed" in out.stdout, out.stdout + out.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    # a host descriptor's map too: the emulator reads none; the addresses stored are compared as the arguments'
    assert [r["status"] for r in rows] == ["ok"] * 6, rows
    sampled = load("emulate_check").SAMPLED_PROGRAMS  # of the 63 programs of the second launch
    assert [r["programs"] for r in rows] == [4, sampled, 2, 20, 3, 4] and rows[1]["grid"] == [63, 1, 1]
    assert "6 launches: 6 ok" in out.stdout


def test_differences_are_measured_where_the_programs_wrote():
    check = load("emulate_check")
    want = torch.tensor([1.0, 2.0, 4.0, float("nan")])
    assert check._difference(want.clone(), want) == 0.0
    assert check._difference(torch.tensor([1.0, 2.0, 3.0, float("nan")]), want) == 0.25
    assert check._difference(torch.tensor([1.0, 2.0, 4.0, 0.0]), want) == float("inf")  # NaN in one only
    written = torch.tensor([True, True, False, False])
    assert check._difference(torch.tensor([1.0, 2.0, 0.0, 0.0]), want, written) == 0.0
    assert check._difference(torch.tensor([5, 6]), torch.tensor([5, 7])) == 1.0
    # the largest magnitude is the whole output's: noise where the programs wrote is measured against it
    assert check._difference(torch.tensor([1e-7, 2.0, 4.0, 8.0]), torch.tensor([2e-7, 2.0, 4.0, 8.0]),
                             torch.tensor([True, False, False, False])) == pytest.approx(1e-7 / 8)
    fp8 = torch.tensor([1.0, 2.0, 4.0]).to(torch.float8_e4m3fn)  # a kernel storing fp8 (lmdeploy's quantizers)
    assert check._difference(torch.tensor([1.0, 2.0, 3.0]).to(torch.float8_e4m3fn), fp8) == 0.25


def test_a_sample_keeps_the_first_and_last_programs():
    check = load("emulate_check")
    assert check._sample((8, 1, 1)) is None
    picked = check._sample((40, 2, 1))
    assert len(picked) == check.SAMPLED_PROGRAMS and picked[0] == (0, 0, 0) and picked[-1] == (39, 1, 0)
    assert len(set(picked)) == len(picked)


def test_an_empty_tensor_reads_back_empty():
    check = load("emulate_check")
    for empty in (torch.zeros(8, dtype=torch.int32)[8:], torch.empty(0, dtype=torch.int32)):
        (raw,) = check._storage_views([empty])  # no bytes from its first element on (NumPy: stride 0)
        assert check._as_tensor(raw, empty).shape == (0,)
        assert check._as_tensor(raw, empty, bits=True).dtype == torch.int32
