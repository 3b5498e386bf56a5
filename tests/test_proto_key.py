"""The compile key: equal for the same kernel in two processes, different when anything that
decides the generated code differs."""
import json
import subprocess
import sys

from kiln.ir import parse_function
from kiln.proto import compile_key, compiler_identity

IR = '''
kernel @k(%x: ptr<fp32> {divisibility = 16}, %n: int32) {
  %pid = program_id {axis = 0} : int32 loc("k.py":2:10)
  %r = arange {end = 64, start = 0} : <64xint32>
  %xs = splat %x : <64xptr<fp32>>
  %xp = addptr %xs, %r : <64xptr<fp32>>
  %v = load %xp : <64xfp32>
  %w = mul %v, %v : <64xfp32>
  store %xp, %w
  return
}
'''
OPTIONS = {"num_warps": 4, "num_stages": 3}

_CHILD = '''
import json, sys
from kiln.ir import parse_function
from kiln.proto import compile_key, compiler_identity
ir, options = json.loads(sys.stdin.read())
print(json.dumps([compile_key(parse_function(ir), "sm_90a", options), compiler_identity()]))
'''


def _child_key(options):
    out = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([IR, options]),
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_two_processes_get_the_same_key():
    for attempt in range(3):  # codegen's sources may change under us (a shared checkout): retry
        (key1, id1), (key2, id2) = _child_key(OPTIONS), _child_key(dict(reversed(list(OPTIONS.items()))))
        if id1 == id2:
            break
    assert id1 == id2 and key1 == key2 and len(key1) == 64
    assert compile_key(parse_function(IR), "sm_90a", OPTIONS, id1) == key1


def test_key_depends_on_target_options_identity_and_ir():
    fn = parse_function(IR)
    base = compile_key(fn, "sm_90a", OPTIONS)
    identity = compiler_identity()
    assert compile_key(fn, "sm_90a", OPTIONS, identity) == base
    assert set(identity) == {"kiln", "codegen", "llvm", "nvjitlink", "ptxas", "libdevice"}
    others = {
        compile_key(fn, "sm_80", OPTIONS),
        compile_key(fn, "sm_90a", {**OPTIONS, "num_warps": 8}),
        compile_key(fn, "sm_90a", {**OPTIONS, "debug": True}),
        compile_key(fn, "sm_90a", OPTIONS, {**identity, "codegen": "0" * 64}),
        compile_key(fn, "sm_90a", OPTIONS, {**identity, "nvjitlink": "none"}),
        compile_key(fn, "sm_90a", OPTIONS, {**identity, "libdevice": "none"}),
        compile_key(parse_function(IR.replace("mul", "add")), "sm_90a", OPTIONS),
    }
    assert base not in others and len(others) == 7


def test_parts_do_not_run_together():
    # the target and the options are length-prefixed, so moving text between them changes the key
    fn = parse_function(IR)
    assert compile_key(fn, "sm_9", {"a": 1}) != compile_key(fn, "sm_", {"9a": 1})


def test_toolchain_versions_are_remembered_by_library_fingerprint(tmp_path, monkeypatch):
    from kiln.proto import key
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    live = key._toolchain_versions()  # asks the libraries, writes the memo
    memo = tmp_path / "toolchain.json"
    saved = json.loads(memo.read_text())
    assert {saved["llvm"], saved["nvjitlink"]} == {live["llvm"], live["nvjitlink"]}
    memo.write_text(json.dumps({**saved, "llvm": "remembered"}))
    assert key._toolchain_versions()["llvm"] == "remembered"  # no library import on the warm path
    memo.write_text(json.dumps({**saved, "fingerprint": "other libraries", "llvm": "stale"}))
    assert key._toolchain_versions() == live
    memo.write_text("{broken")
    assert key._toolchain_versions() == live
    memo.write_text(json.dumps({**saved, "ptxas": ["not", "a", "version"]}))  # read back, checked
    assert key._toolchain_versions() == live


def test_toolchain_versions_agree_with_the_package_metadata():
    from importlib.metadata import PackageNotFoundError, version
    from kiln.proto import key
    assert key._llvm_version() == version("llvmlite")
    expected = "none"
    for name in ("nvidia-nvjitlink", "nvidia-nvjitlink-cu13", "nvidia-nvjitlink-cu12"):
        try:
            expected = version(name)
            break
        except PackageNotFoundError:
            continue
    assert key._nvjitlink_version() == expected


def test_wheel_versions_come_from_the_first_dist_info_on_the_path(tmp_path, monkeypatch):
    from kiln.proto import key
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "Nvidia_NvJitLink_cu12-12.4.127.dist-info").mkdir(parents=True)
    (second / "nvidia_nvjitlink-13.0.88.dist-info").mkdir(parents=True)
    (second / "nvidia_nvjitlink_cu12-12.9.0.dist-info").mkdir()
    (second / "nvidia_nvjitlink.dist-info").mkdir()  # no version in the name: not a wheel's folder
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), str(first), str(second)])
    assert key._wheel_version(["nvidia-nvjitlink-cu12"]) == "12.4.127"  # names normalized, first on the path
    assert key._wheel_version(["nvidia-nvjitlink", "nvidia-nvjitlink-cu12"]) == "13.0.88"  # in the names' order
    assert key._wheel_version(["nvidia-nvjitlink-cu13"]) is None


def test_the_identity_hashes_the_ir_package_as_well_as_codegen(tmp_path):
    """A change to kiln.ir alone (its layouts, which lowering builds on) changes the PTX of the same IR: it
    must change the key, or a cache keeps the kernels the build before made (session 101: a batched dot's
    layout change in ir/layout.py left its FMA build in the cache)."""
    import importlib.util
    import shutil
    from pathlib import Path

    from kiln.proto import key
    roots = [(name, Path(list(importlib.util.find_spec(name).submodule_search_locations)[0]))
             for name in ("kiln.ir", "kiln.codegen")]
    assert key.GENERATOR_PACKAGES == ("kiln.ir", "kiln.codegen")
    assert key.codegen_source_hash() == key.sources_hash(roots) == compiler_identity()["codegen"]
    copies = []
    for name, root in roots:
        shutil.copytree(root, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        copies.append((name, tmp_path / name))
    before = key.sources_hash(copies)
    assert before == key.sources_hash(roots)  # by paths under each package, not where it lies
    layout = tmp_path / "kiln.ir" / "layout.py"
    layout.write_text(layout.read_text() + "\n# a change\n")
    assert key.sources_hash(copies) != before
