"""The PTX of the codegen corpus (tests/codegen_corpus/ptx_diff.py's kernel set) against the
digests recorded in tests/codegen_corpus/ptx_digests.json: a change to any kernel's PTX fails
here, so that it is a choice made on purpose, not a side effect of another change."""
import importlib.util
import json
import pathlib

import pytest

from kiln.daemon import tiers

CORPUS = pathlib.Path(__file__).parent / "codegen_corpus"


def load_ptx_diff():
    spec = importlib.util.spec_from_file_location("kiln_ptx_diff", CORPUS / "ptx_diff.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ptx_diff = load_ptx_diff()


def failure_message(changes: list[str]) -> str:
    return "\n".join([
        f"the PTX of {len(changes)} corpus kernel(s) no longer matches {ptx_diff.DIGESTS.name}:",
        *(f"  {change}" for change in changes),
        "If the change is intended (a measured codegen improvement), regenerate the digests:",
        f"  {ptx_diff.REGENERATE}",
        "To see what changed, write the PTX on the old and on the new commit and compare:",
        "  python tests/codegen_corpus/ptx_diff.py --out /tmp/before          # old commit",
        "  python tests/codegen_corpus/ptx_diff.py --out /tmp/after --against /tmp/before",
    ])


@pytest.mark.parametrize("part", ptx_diff.PARTS)  # (one test a part, so that workers share the compiles)
def test_no_corpus_kernel_s_ptx_changed(monkeypatch, tmp_path, part):
    recorded = json.loads(ptx_diff.DIGESTS.read_text())
    if recorded["llvm"] != ptx_diff.llvm_version():
        pytest.skip(f"the PTX digests were recorded with LLVM {recorded['llvm']}, this is LLVM "
                    f"{ptx_diff.llvm_version()}: regenerate them with `{ptx_diff.REGENERATE}`")
    # compiled in this process now, not read from a cache that an earlier test or compiler filled
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KILN_DAEMON", "off")
    monkeypatch.delenv("KILN_REMOTE_CACHE", raising=False)
    monkeypatch.setattr(tiers, "_state", tiers._State())
    wanted = {name: digest for name, digest in recorded["ptx"].items() if ptx_diff.part_of(name) == part}
    changes = ptx_diff.compare_digests(ptx_diff.ptx_digests([part]), wanted)
    assert not changes, failure_message(changes)
