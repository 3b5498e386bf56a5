"""The drop-in switch (kiln.dropin): off unless asked, `import triton` is kiln in the process and
its children when KILN_DROPIN=1 or under `kiln run`, a real Triton untouched, `kiln doctor` says
which is active. Each check runs in a fresh interpreter, as a job would start."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kiln.dropin import doctor, hook

if doctor.installed_hook() is None:
    reason = "kiln's drop-in hook (kiln-dropin.pth) is not installed here: reinstall with pip install -e ."
    if os.environ.get("CI"):
        raise RuntimeError(reason)  # CI installs kiln the README's way, which installs it
    pytest.skip(reason, allow_module_level=True)

WHICH = "import triton, sys; print(getattr(triton, 'DROPIN', False), triton.__name__)"


def _python(code, env_extra=None, drop=(), cwd=None):
    env = {k: v for k, v in os.environ.items() if k != hook.ENV and k not in drop}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture
def fake_triton(tmp_path):
    """A stand-in for an installed Triton: a `triton` package on PYTHONPATH."""
    package = tmp_path / "site" / "triton"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '3.6.0'\nREAL = True\n")
    return {"PYTHONPATH": str(tmp_path / "site")}


def test_off_by_default_the_installed_triton_is_imported(fake_triton):
    out = _python("import triton; print(triton.REAL, triton.__file__)", fake_triton)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True ") and "site" in out.stdout
    assert out.stderr == ""


@pytest.mark.parametrize("value", ["0", "", "off"])
def test_explicitly_off_values(fake_triton, value):
    out = _python(WHICH, {**fake_triton, hook.ENV: value})
    assert out.stdout.split() == ["False", "triton"], out.stderr


def test_on_resolves_triton_to_kiln_ahead_of_an_installed_triton(fake_triton):
    out = _python(WHICH, {**fake_triton, hook.ENV: "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "kiln.dropin.facade"]


def test_submodules_inductor_imports_resolve_to_kiln():
    out = _python("""
        import triton, triton.language as tl, kiln, kiln.language
        from triton.compiler.compiler import ASTSource, CompiledKernel, make_backend, triton_key
        from triton.runtime.autotuner import Autotuner, OutOfResources, PTXASError
        from triton.runtime.jit import JITFunction, KernelInterface
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver
        from triton.language.extra import libdevice
        from triton import knobs
        import triton.runtime.driver
        assert tl is kiln.language and triton.runtime.driver is driver and triton.jit is triton.runtime.jit.jit
        assert libdevice is kiln.language.extra.libdevice and triton.__version__ == "3.6.0"
        assert "cpu" in triton.backends.backends and callable(triton.compile)
        import kiln.errors, triton.runtime.errors  # the error kiln's builds raise is the one Inductor catches
        assert PTXASError is kiln.errors.PTXASError is triton.runtime.errors.PTXASError
        from kiln.tensor_wrapper import MockTensor, TensorWrapper, reinterpret
        from triton.runtime import MockTensor as M, TensorWrapper as T, reinterpret as r
        assert (M, T, r) == (MockTensor, TensorWrapper, reinterpret) and triton.MockTensor is MockTensor
        print("ok")
    """, {hook.ENV: "1"})
    assert out.stdout.strip() == "ok", out.stderr


def test_a_triton_module_kiln_lacks_is_a_clear_import_error():
    out = _python("""
        try:
            import triton.compiler.code_generator
        except ModuleNotFoundError as e:
            print(e.name, "|", e)
    """, {hook.ENV: "1"})
    name, message = out.stdout.split(" | ")
    assert name == "triton.compiler.code_generator" and "drop-in mode" in message, out.stderr


def test_children_inherit_the_mode_subprocess_and_multiprocessing_spawn(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, subprocess, sys

        def which(queue):
            import triton
            queue.put(triton.__name__)

        if __name__ == "__main__":
            child = subprocess.run([sys.executable, "-c", "import triton; print(triton.__name__)"],
                                   capture_output=True, text=True)
            ctx = multiprocessing.get_context("spawn")  # Inductor's compile workers are started so
            queue = ctx.Queue()
            p = ctx.Process(target=which, args=(queue,))
            p.start()
            print(child.stdout.strip(), queue.get(timeout=60))
            p.join()
    """))
    env = {**os.environ, hook.ENV: "1"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["kiln.dropin.facade"] * 2, out.stderr


def test_a_bad_value_warns_and_leaves_triton_alone(fake_triton):
    out = _python(WHICH, {**fake_triton, hook.ENV: "maybe"})
    assert out.stdout.split() == ["False", "triton"]
    assert "KILN_DROPIN='maybe'" in out.stderr and "drop-in mode not active" in out.stderr


def test_triton_imported_before_activation_is_refused(fake_triton):
    out = _python("import triton; from kiln.dropin import hook; hook.activate()", fake_triton)
    assert out.returncode != 0 and "real Triton was imported before" in out.stderr


def _kiln(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != hook.ENV}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "kiln.daemon", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_kiln_run_turns_it_on_for_the_command_and_its_children(fake_triton):
    child = "import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'import triton; " \
            "print(triton.__name__)'], capture_output=True, text=True).stdout.strip())"
    out = _kiln("run", "--", sys.executable, "-c", child, env_extra=fake_triton)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "kiln.dropin.facade"


def test_kiln_run_without_a_command_or_with_a_missing_one():
    out = _kiln("run")
    assert out.returncode == 2 and "give the command after --" in out.stderr
    out = _kiln("run", "--", "no-such-command-kiln-test")
    assert out.returncode == 127 and "cannot run 'no-such-command-kiln-test'" in out.stderr


@pytest.mark.parametrize("command, advised", [
    (["torchrun", "--nproc-per-node", "8", "train.py"], True),
    (["torchrun", "--nnodes", "2", "--nproc_per_node=4", "train.py", "--lr", "1"], True),
    (["python3", "-m", "torch.distributed.run", "--nproc-per-node=gpu", "train.py"], True),
    (["torchrun", "--nproc-per-node", "8", "--virtual-local-rank", "train.py"], False),
    (["torchrun", "--nproc-per-node", "1", "train.py"], False),
    (["torchrun", "train.py", "--nproc-per-node", "8"], False),  # the script's own flag
    (["python3", "train.py"], False),
])
def test_kiln_run_advises_virtual_local_rank_to_share_graphs(command, advised, monkeypatch):
    monkeypatch.setattr(doctor, "_torchrun_has_virtual_local_rank", lambda: True)
    assert (doctor.torchrun_advice(command, {}) is not None) == advised
    assert doctor.torchrun_advice(command, {"KILN_SHARE_GRAPHS": "0"}) is None  # graphs not shared anyway
    monkeypatch.setattr(doctor, "_torchrun_has_virtual_local_rank", lambda: False)
    assert doctor.torchrun_advice(command, {}) is None  # an older torchrun: nothing to advise


def test_the_torchrun_probe_reads_the_installed_torch_without_importing_it():
    has = doctor._torchrun_has_virtual_local_rank()
    try:
        import torch.distributed.run as run
    except ImportError:
        assert has is False
        return
    assert has == ("--virtual-local-rank" in open(run.__file__, encoding="utf-8").read())


def test_kiln_run_prints_the_advice_and_runs_torchrun(tmp_path):
    if not doctor._torchrun_has_virtual_local_rank():
        pytest.skip("the installed PyTorch's torchrun has no --virtual-local-rank")
    fake = tmp_path / "torchrun"
    fake.write_text("#!/bin/sh\necho ran \"$@\"\n")
    fake.chmod(0o755)
    out = _kiln("run", "--", "torchrun", "--nproc-per-node", "2", "train.py",
                env_extra={"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert out.returncode == 0 and out.stdout.strip() == "ran --nproc-per-node 2 train.py"
    assert "--virtual-local-rank" in out.stderr


def test_doctor_says_which_triton_and_why(fake_triton):
    off = json.loads(_kiln("doctor", "--json", env_extra=fake_triton).stdout)
    assert off["import_triton"] == "triton" and "not set" in off["why"]
    assert off["installed_triton"]["location"].endswith(os.path.join("triton", "__init__.py"))
    on = _kiln("doctor", env_extra={**fake_triton, hook.ENV: "1"})
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith("import triton -> kiln (Triton 3.6.0 API)")
    assert "shadowed by kiln" in on.stdout and "KILN_DROPIN=1" in on.stdout
    bad = json.loads(_kiln("doctor", "--json", env_extra={hook.ENV: "perhaps"}).stdout)
    assert bad["import_triton"] != "kiln" and "KILN_DROPIN='perhaps'" in bad["why"]


def test_importlib_metadata_names_the_release_the_facade_follows(fake_triton, tmp_path):
    """Under the drop-in `importlib.metadata.version("triton")` is `triton.__version__`, also where another
    Triton's distribution is installed (here 3.5.0's, on PYTHONPATH); without it, that distribution's."""
    info = tmp_path / "site" / "triton-3.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.5.0\n")
    code = "import importlib.metadata as m, triton; print(m.version('triton'), m.version('Triton'), triton.__version__)"
    on = _python(code, {**fake_triton, hook.ENV: "1"})
    assert on.returncode == 0, on.stderr
    version = on.stdout.split()
    assert version == [version[2]] * 3 and version[2] != "3.5.0"
    off = _python(code, fake_triton)
    assert off.stdout.split()[:2] == ["3.5.0", "3.5.0"], off.stderr
    # no distribution listed twice: the listing of all stays the other finders'
    listed = _python("import importlib.metadata as m; print(sum(d.metadata['Name'] == 'triton' "
                     "for d in m.distributions()))", {**fake_triton, hook.ENV: "1"})
    assert listed.stdout.split() == ["1"], listed.stderr


def test_kiln_name_table():
    assert hook.kiln_name("triton") == "kiln.dropin.facade"
    assert hook.kiln_name("triton.language.extra.cuda.libdevice") == "kiln.language.extra.cuda.libdevice"
    assert hook.kiln_name("tritonx") is None and hook.kiln_name("numpy") is None
    with pytest.raises(ValueError, match="use 1"):
        hook.requested({hook.ENV: "2"})
    assert hook.requested({}) is False and hook.requested({hook.ENV: " ON "}) is True


def test_the_driver_is_made_when_first_asked_for_and_is_tritons_driver_type():
    """Triton's DriverConfig makes its drivers at first use (`_active` and `_default` are None until
    then), and they are `triton.backends.driver.DriverBase`s, which code checks and subclasses."""
    out = _python("""
        import triton
        drv = triton.runtime.driver
        print(drv._active is None, drv._default is None)
        base = triton.backends.driver.DriverBase
        print(isinstance(drv.active, base), isinstance(drv.default, base), drv.active is not None)
        print(issubclass(triton.backends.backends["nvidia"].driver, triton.backends.driver.GPUDriver))
        print(callable(drv.default.get_benchmarker()), triton.backends.compiler is triton.backends)
    """, {hook.ENV: "1"})
    assert out.stdout.split() == ["True"] * 8, out.stdout + out.stderr


def test_tritons_cuda_backend_module_has_the_names_code_imports_from_it():
    """`triton.backends.nvidia.compiler` / `.driver`: autotuners catch its PTXASError, tools read CUDAOptions'
    fields and parse options through CUDABackend, setup scripts make a CudaUtils, templates ask min_dot_size."""
    out = _python("""
        import dataclasses
        import triton, triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import (CUDABackend, CUDAOptions, PTXASError, min_dot_size,
                                                     ptx_get_version, sm_arch_from_capability)
        from triton.backends.nvidia.driver import CudaDriver, CudaUtils
        import triton.backends.nvidia as nvidia
        print(nvidia.compiler is nvidia.driver is nvidia, PTXASError is triton.runtime.errors.PTXASError)
        print("num_warps" in {f.name for f in dataclasses.fields(CUDAOptions)},
              CUDABackend(GPUTarget("cuda", 90, 32)).parse_options({"num_warps": 8}).num_warps == 8)
        smallest = min_dot_size(GPUTarget("cuda", 90, 32))
        print(smallest(tl.block_type(tl.float16, [16, 16]), tl.block_type(tl.float16, [16, 16])) == (1, 1, 16),
              smallest(tl.block_type(tl.float8e5, [16, 32]), tl.block_type(tl.float8e5, [32, 16])) == (1, 1, 32))
        print([ptx_get_version(v) for v in ("11.8", "12.4", "12.8", "13.0")] == [78, 84, 87, 90],
              sm_arch_from_capability(90) == "sm_90a" and sm_arch_from_capability(80) == "sm_80")
        print(CudaUtils() is CudaUtils() is CudaDriver.utils, triton.backends.backends["nvidia"].driver is CudaDriver)
    """, {hook.ENV: "1"})
    assert out.stdout.split() == ["True"] * 10, out.stdout + out.stderr


def test_importing_triton_leaves_cuda_uninitialized_until_a_driver_is_asked_for():
    """Inductor's compile workers import triton and then fork the pool that compiles: a parent
    that has initialized CUDA leaves the forked children unable to use it ("Could not find an
    active GPU backend"). So the driver is chosen at first use, as Triton's lazy driver is."""
    out = _python("""
        from kiln.runtime import cuda_driver
        asked = []
        real = cuda_driver.is_available
        cuda_driver.is_available = lambda: asked.append(1) or real()
        import triton, triton.runtime, triton.language
        from triton.compiler.compiler import ASTSource, CompiledKernel
        print(len(asked))
        triton.runtime.driver.active.get_current_target()
        print(len(asked) > 0)
    """, {hook.ENV: "1"})
    assert out.stdout.split() == ["0", "True"], out.stderr
