"""The packages import downward only, at module load: ir, then proto and codegen, then cache, then
daemon, then the frontend (the `kiln` package itself: language, runtime, drop-in). And no module
imports itself back through others when loaded. An import inside a function (a CLI command that
builds the user's kernels with the frontend) is not a load-time edge and is not checked."""
import ast
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# folder -> (its package's name, its layer): a module may import, at load, its own layer or lower ones
PACKAGES = {"ir": ("kiln.ir", 0), "proto": ("kiln.proto", 1), "codegen": ("kiln.codegen", 1),
            "cache": ("kiln.cache", 2), "daemon": ("kiln.daemon", 3), "frontend": ("kiln", 4)}


def folder_of(module: str):
    """The folder whose package holds `module` (the longest package name that prefixes it)."""
    best = None
    for folder, (package, _) in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            if best is None or len(package) > len(PACKAGES[best][0]):
                best = folder
    return best


def load_time_imports(tree):
    """Import statements that run when the module loads: at top level, or under a top-level if/try."""
    found = []

    def walk(body):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                walk(node.orelse)
                walk(node.finalbody)
                for handler in node.handlers:
                    walk(handler.body)
    walk(tree.body)
    return found


def modules():
    """(module name, folder, path) of every module of the six packages."""
    for folder, (package, _) in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            yield ".".join([package, *parts]), folder, path


def targets(node, module: str, is_package: bool, known=frozenset()) -> list[str]:
    """The modules an import statement loads: `from m import x` loads m.x where that is a module
    (a package's submodule), else m itself (x is a name m defines)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: from the module's package, up level - 1
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]


def graph():
    """module -> the kiln modules it imports at load."""
    known = frozenset(name for name, _, _ in modules())
    edges = {}
    for name, folder, path in modules():
        out = set()
        for node in load_time_imports(ast.parse(path.read_text(), str(path))):
            for target in targets(node, name, path.name == "__init__.py", known):
                if target in known and target != name:
                    out.add(target)
        edges[name] = out
    return edges


def test_packages_import_downward_only_at_load():
    folders = {name: folder for name, folder, _ in modules()}
    upward = []
    for name, imported in graph().items():
        layer = PACKAGES[folders[name]][1]
        for target in imported:
            if PACKAGES[folder_of(target)][1] > layer:
                upward.append(f"{name} imports {target}")
    assert not upward, "\n".join(sorted(upward))


def test_no_module_imports_itself_back_at_load():
    edges = graph()
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def connect(v):  # Tarjan's strongly connected components, iteratively deep enough for ~300 modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))
    for v in edges:
        if v not in index:
            connect(v)
    assert not cycles, cycles


def test_the_checks_see_an_upward_import():
    tree = ast.parse("from kiln.daemon import client\nimport kiln.ir\ndef f():\n    import kiln.dropin\n")
    known = frozenset({"kiln.daemon.client", "kiln.ir", "kiln.dropin"})
    found = [t for node in load_time_imports(tree) for t in targets(node, "kiln.codegen.x", False, known)]
    assert "kiln.daemon.client" in found and "kiln.ir" in found and not any("dropin" in t for t in found)
    assert PACKAGES[folder_of("kiln.daemon.client")][1] > PACKAGES["codegen"][1]
    assert folder_of("kiln.language.core") == "frontend" and folder_of("kiln.ir.types") == "ir"


def test_a_compile_worker_and_the_cli_load_no_frontend():
    # the package `kiln` loads its user API (language, JIT, autotuner) when a name of it is first asked
    # for, so a process of the compiler, the daemon and its CLI starts without them
    code = ("import sys, kiln.codegen.compiler, kiln.daemon.server, kiln.daemon.cli\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('kiln'))))")
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DROPIN", "KILN_REMOTE_CACHE")}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                            cwd=ROOT / "tests").stdout.split()
    assert "kiln.codegen.compiler" in loaded
    assert [m for m in loaded if folder_of(m) == "frontend" and m != "kiln"] == []


def test_the_packages_names_load_in_any_order():
    # the JIT builds the language's own @jit functions and imports none of the language at load
    # (kiln.constexpr): whichever a program imports first, both load
    for first in ("kiln.jit", "kiln.language", "kiln.autotuner", "kiln.language.core", "kiln.knobs"):
        code = (f"import {first}, kiln\nimport kiln.language as tl\n"
                "import kiln.jit\n"  # the module: kiln.jit stays the decorator
                "assert callable(kiln.jit) and callable(kiln.autotune) and tl.rand\n"
                "assert kiln.knobs is __import__('kiln.dropin.knobs').dropin.knobs")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT / "tests")


def test_a_compile_of_fp32_or_bf16_kernels_loads_no_ml_dtypes(tmp_path):
    # ml_dtypes 0.7 takes 0.5 s of CPU to import: a compile worker's or a job's cold start (triton.compile
    # under the drop-in, as torch.compile's) does without it, bf16 constants folded and printed included
    code = (
        "import sys\nimport triton, triton.language as tl\n"
        "from triton.compiler import ASTSource\nfrom triton.backends.compiler import GPUTarget\n"
        "@triton.jit\ndef add(x, y, out, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + tl.load(y + offs, mask=offs < n), mask=offs < n)\n"
        "@triton.jit\ndef scale(x, out, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    v = tl.load(x + offs, mask=offs < n, other=0.0)\n"
        "    low = tl.full([BLOCK], 2.5, tl.float32).to(tl.bfloat16)\n"
        "    w = tl.where(v > 0, v * tl.full([BLOCK], 0.3, tl.bfloat16), low)\n"
        "    tl.store(out + offs, w.to(tl.bfloat16), mask=offs < n)\n"
        "pairs = (add, {'x': '*fp32', 'y': '*fp32', 'out': '*fp32'}), (scale, {'x': '*bf16', 'out': '*bf16'})\n"
        "for fn, sig in pairs:\n"
        "    src = ASTSource(fn, {**sig, 'n': 'i32', 'BLOCK': 'constexpr'}, {'BLOCK': 1024})\n"
        "    assert triton.compile(src, target=GPUTarget('cuda', 90, 32)).asm['ptx']\n"
        "print('ml_dtypes' in sys.modules, 'kiln.dropin' in sys.modules)\n")
    (tmp_path / "compile_add.py").write_text(code)  # a file: the JIT reads a kernel's source from it
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(KILN_DROPIN="1", KILN_DAEMON="off", KILN_CACHE_DIR=str(tmp_path / "cache"),
               KILN_RUNTIME_DIR=str(tmp_path / "run"))
    done = subprocess.run([sys.executable, str(tmp_path / "compile_add.py")], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]
