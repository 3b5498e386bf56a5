"""kiln's KILN_ environment variables are read in one module, kiln.cache.env, which documents each:
no other module of the six packages reads one (`os.environ.get("KILN_X")`, `environ["KILN_X"]`,
`os.getenv("KILN_X")`). The one exception is the `import triton` hook, which runs before kiln loads
and so cannot import it. Writing a variable (a child's environment) is not reading it."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("ir", "proto", "codegen", "cache", "daemon", "frontend")
READER = ROOT / "cache" / "env.py"
BEFORE_KILN_LOADS = {ROOT / "frontend" / "dropin" / "hook.py": {"KILN_DROPIN", "KILN_SHARE_GRAPHS"}}


def _is_environ(node) -> bool:
    """`os.environ`, or a name or attribute ending in environ (a dict of a job's environment)."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.endswith("environ")


def _kiln_name(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("KILN_"):
        return node.value
    return None


def kiln_reads(tree) -> list[tuple[int, str]]:
    """(line, variable) of every read of a KILN_ variable by its literal name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            reads = (isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)) or \
                (isinstance(func, ast.Attribute) and func.attr == "getenv")
            name = _kiln_name(node.args[0]) if reads else None
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            name = _kiln_name(node.slice)
        else:
            name = None
        if name is not None:
            found.append((node.lineno, name))
    return found


def test_only_the_settings_module_reads_kiln_variables():
    strays = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == READER:
                continue
            allowed = BEFORE_KILN_LOADS.get(path, set())
            strays += [f"{path.relative_to(ROOT)}:{line}: {name}"
                       for line, name in kiln_reads(ast.parse(path.read_text(), str(path))) if name not in allowed]
    assert not strays, "read these through kiln.cache.env (and document them there):\n" + "\n".join(strays)


def test_the_check_finds_each_way_of_reading():
    source = ("import os\nos.environ.get('KILN_A')\nos.environ['KILN_B']\nos.getenv('KILN_C')\n"
              "environ.get('KILN_D', '')\nos.environ['KILN_E'] = '1'\nos.environ.get('PATH')\n")
    assert kiln_reads(ast.parse(source)) == [(2, "KILN_A"), (3, "KILN_B"), (4, "KILN_C"), (5, "KILN_D")]


def test_every_variable_read_is_documented_in_the_settings_module():
    text = READER.read_text()
    doc = ast.get_docstring(ast.parse(text))
    read = {name for _, name in kiln_reads(ast.parse(text))}
    read |= {node.args[0].value for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_switch" and _kiln_name(node.args[0])}
    missing = sorted(name for name in read if name not in doc)
    assert not missing, f"kiln.cache.env reads {missing} without a line in its docstring's table"
