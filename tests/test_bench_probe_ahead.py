"""bench/probe_ahead.py's kernel: Inductor's foreach AdamW step for N parameters builds as kiln IR
with one branch per parameter, each with its own five inputs and three outputs."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import probe_ahead  # noqa: E402


def test_the_step_has_a_branch_per_parameter(tmp_path):
    import importlib.util

    from kiln import language as tl
    from kiln.compiler import compile_kernel
    path = tmp_path / "foreach_3.py"
    path.write_text(probe_ahead.foreach_source(3))
    spec = importlib.util.spec_from_file_location("foreach_3", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = module.foreach_3
    assert len(fn.arg_names) == 3 * 8 and fn.arg_names[-1] == "out_ptr8"
    kernel = compile_kernel(fn, {a: (tl.pointer_type(tl.float32), {"divisibility": 16}) for a in fn.arg_names},
                            {"num_warps": 4})
    stores = [op for op in kernel.ir.walk() if op.name == "store"]
    assert len(stores) == 9  # three per parameter
