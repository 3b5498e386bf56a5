"""bench/run.py's two halves (`--part 1`, `--part 2`) make one table (`--merge`): no GPU needed."""
import json
import os
import sys

import pytest

pytest.importorskip("torch")  # bench/run.py imports it to measure; merging does not use it
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import run  # noqa: E402

META = {"gpu": "NVIDIA H200", "date": "2026-11-30", "torch": "2.11.0", "triton_version": "3.6.0"}
MEMORY = [{"size": 1024, "kiln": 1000.0, "triton": 990.0, "torch": 900.0}]
ATTENTION = [{"mode": "fp8", "dim": 64, "causal": False, "n_ctx": 4096, "kiln": 460.0, "triton": 458.0, "sdpa": 438.0,
              "configs": {"kiln": [128, 64, 3, 8], "triton": [128, 64, 3, 8]}}]


def write(path, **sections):
    path.write_text(json.dumps({**META, **sections}))
    return str(path)


def test_the_two_parts_merge_into_one_run_with_every_table(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # bench/attention.py puts bench/ first: not past this test
    first = write(tmp_path / "a.json", vector_add=MEMORY, softmax=MEMORY)
    second = write(tmp_path / "b.json", attention_fp8=ATTENTION, launch_us={"kiln": 11.4, "triton": 13.4, "torch": 7.5})
    merged = run.merge([first, second])
    assert set(run.PARTS[1]) | set(run.PARTS[2]) == set(run.sections(None, quick=True))
    text = run.markdown(merged)
    assert "### vector add fp32" in text and "### fused softmax fp32, 4096 rows" in text
    assert "fp8 e5m2" in text and "| fp8 | 64 | False | 4096 | 460 | 458 | 438 | 1.00 | 1.05 | (128, 64, 3, 8) |" in text
    assert "kiln / Triton 0.85" in text and "layer norm" not in text  # a section neither part ran has no table


def test_parts_of_other_gpus_or_versions_do_not_merge(tmp_path):
    first = write(tmp_path / "a.json", vector_add=MEMORY)
    (tmp_path / "b.json").write_text(json.dumps({**META, "gpu": "NVIDIA H100", "softmax": MEMORY}))
    with pytest.raises(SystemExit, match="gpu"):
        run.merge([first, str(tmp_path / "b.json")])
