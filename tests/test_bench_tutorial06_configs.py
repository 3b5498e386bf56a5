"""bench/tutorial06_configs.py: its table (one row per (D, N_CTX, config), each library's TFLOP/s or why it has
none, kiln / Triton only where both ran correct) and its fp8 reference. No GPU needed."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import tutorial06_configs  # noqa: E402


def test_configs_parse_as_the_kernels_launch_takes_them():
    assert tutorial06_configs.parse_configs("128x64x3x4,64x64x2x8") == [(128, 64, 3, 4), (64, 64, 2, 8)]


def test_the_table_rows_each_config_with_a_ratio_where_both_libraries_ran_correct():
    kiln = [dict(D=64, N_CTX=16384, config=[128, 64, 3, 4], tflops=420.0),
            dict(D=128, N_CTX=16384, config=[128, 128, 2, 8], tflops=510.0)]
    triton = [dict(D=64, N_CTX=16384, config=[128, 64, 3, 4], error="max error nan"),
              dict(D=128, N_CTX=16384, config=[128, 128, 2, 8], tflops=500.0)]
    lines = tutorial06_configs.table({"kiln": kiln, "triton": triton}, causal=False)
    assert lines[0].startswith("### tutorial 06's forward") and "causal=False" in lines[0] and "fp16" in lines[0]
    assert lines[2] == "| D | N_CTX | config | kiln TFLOP/s | triton TFLOP/s | kiln / triton |"
    assert lines[4] == "| 64 | 16384 | (128, 64, 3, 4) | 420.0 | max error nan | - |"
    assert lines[5] == "| 128 | 16384 | (128, 128, 2, 8) | 510.0 | 500.0 | 1.02 |"
    assert len(lines) == 6


def test_one_library_has_no_ratio_column():
    lines = tutorial06_configs.table({"kiln": [dict(D=64, N_CTX=4096, config=[64, 64, 3, 4], tflops=1.0)]}, True)
    assert lines[2] == "| D | N_CTX | config | kiln TFLOP/s |" and lines[3] == "|---:|---:|---|---:|"
    assert lines[4] == "| 64 | 4096 | (64, 64, 3, 4) | 1.0 |"


def test_the_fp8_reference_reads_v_as_the_tutorials_descriptor_does():
    """V kept [Z][H][D][N]; head g's rows are descriptor columns g * D * N + n of Z * H * N: at D = N = 16
    the 128 heads' first 8 are read whole, the rest as zeros, so their reference output is zero."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e5m2"):
        pytest.skip("no float8_e5m2 in this torch")
    q, k, v, want = tutorial06_configs.operands(torch, 16, 16, fp8=True, causal=False, device="cpu")
    assert q.dtype == k.dtype == v.dtype == torch.float8_e5m2 and v.permute(0, 1, 3, 2).is_contiguous()
    heads = want.view(-1, 16, 16)
    assert all(heads[g].abs().max() > 0 for g in range(8)) and heads[8:].abs().max() == 0


def test_the_backwards_table_carries_sdpas_column_and_ratio():
    row = dict(D=128, N_CTX=4096, config=list(tutorial06_configs.parse_configs(tutorial06_configs.BACKWARD)[0]))
    kiln = [dict(row, tflops=300.0, sdpa_tflops=400.0)]
    triton = [dict(row, tflops=250.0, sdpa_tflops=410.0)]
    lines = tutorial06_configs.table({"kiln": kiln, "triton": triton}, causal=True, kind="fp16 backward")
    assert "backward" in lines[0] and "causal=True" in lines[0]
    assert lines[2] == ("| D | N_CTX | config | kiln TFLOP/s | triton TFLOP/s | kiln / triton | SDPA TFLOP/s |"
                        " kiln / SDPA |")
    assert lines[3] == "|---:|---:|---|---:|---:|---:|---:|---:|"
    assert lines[4] == "| 128 | 4096 | (32, 128, 128, 32, 5, 4) | 300.0 | 250.0 | 1.20 | 400.0 | 0.75 |"


def test_work_items_skip_blocks_wider_than_the_head_and_the_backward_takes_its_own_configs():
    args = tutorial06_configs.argparse.Namespace(dims="64,128", ctx="4096", configs="128x128x2x8,128x64x3x4", bwd=False,
                                                 bwd_configs=tutorial06_configs.BACKWARD)
    assert tutorial06_configs.work_items(args) == [(64, 4096, [128, 64, 3, 4]), (128, 4096, [128, 128, 2, 8]),
                                                   (128, 4096, [128, 64, 3, 4])]
    args.bwd = True
    own = [32, 128, 128, 32, 5, 4]
    assert tutorial06_configs.work_items(args) == [(64, 4096, own), (128, 4096, own)]
    args.bwd_configs = "32x128x128x32x5x4,64x128x128x64x3x8"  # every backward config at every head size
    assert [config for _, _, config in tutorial06_configs.work_items(args)] == [own, [64, 128, 128, 64, 3, 8]] * 2


CHILD = """
import json, os, sys
items, skip, marker = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for i, (dim, n_ctx, config) in enumerate(items[skip:], skip):
    if i == 1 and not os.path.exists(marker):  # the second item kills the first child, as a driver fault would
        open(marker, "w").close()
        os.abort()
    print("a line that is not a row")
    print(json.dumps(dict(D=dim, N_CTX=n_ctx, config=config, tflops=float(i))), flush=True)
"""


def test_a_child_that_dies_costs_its_item_and_a_new_child_runs_the_rest(tmp_path):
    """Real processes: the first child reports item 0 and aborts in item 1; item 1 gets a row saying so and a
    second child, started past it, reports items 2 and 3."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    items = [(64, 4096, [128, 64, 3, 4]), (64, 4096, [64, 64, 3, 4]), (128, 4096, [128, 128, 2, 8]),
             (128, 4096, [128, 64, 3, 4])]
    starts = []

    def command(skip):
        starts.append(skip)
        return [sys.executable, str(child), json.dumps(items), str(skip), str(tmp_path / "died")]
    rows = tutorial06_configs.run_library("triton", [], items, command)
    assert starts == [0, 2]
    assert [r.get("tflops") for r in rows] == [0.0, None, 2.0, 3.0]
    assert rows[1] == dict(D=64, N_CTX=4096, config=[64, 64, 3, 4], error="its process died (SIGABRT)")


def test_a_child_that_ends_without_every_row_stops_the_run(tmp_path):
    child = tmp_path / "child.py"
    child.write_text("print('nothing')")
    with pytest.raises(SystemExit, match="1 configs unreported"):
        tutorial06_configs.run_library("kiln", [], [(64, 4096, [64, 64, 3, 4])],
                                       lambda skip: [sys.executable, str(child)])
