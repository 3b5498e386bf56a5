"""One module reads the environment: kiln.cache.env, where every variable kiln reads is documented.
Besides it only Triton's own knobs (kiln.dropin.knobs: env-backed, read on every access, as
Triton's are) and the drop-in's start-up hook (kiln.dropin.hook: it runs before kiln can be
imported) touch `os.environ`; elsewhere a module may only set a variable for the processes it
starts (`os.environ[name] = value`)."""
import ast

from test_import_layers import modules

READERS = {"kiln.cache.env", "kiln.dropin.knobs", "kiln.dropin.hook"}


def environment_reads(tree) -> list[int]:
    """Lines that read the environment: `os.environ` other than as an assignment's target,
    `os.getenv`, and `environ` or `getenv` imported from os."""
    stores = {id(node.value) for node in ast.walk(tree)
              if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in ("environ", "environb", "getenv", "getenvb") and id(node) not in stores:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                and any(alias.name in ("environ", "getenv") for alias in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_settings_module_reads_the_environment():
    found = {}
    for name, _folder, path in modules():
        if name not in READERS:
            lines = environment_reads(ast.parse(path.read_text(), str(path)))
            if lines:
                found[name] = lines
    assert not found, f"read the environment through kiln.cache.env instead: {found}"


def test_the_check_sees_each_way_of_reading_it():
    code = ("import os\nfrom os import getenv\na = os.environ.get('X')\nb = os.getenv('Y')\n"
            "c = dict(os.environ)\nos.environ['Z'] = '1'\n")
    assert environment_reads(ast.parse(code)) == [2, 3, 4, 5]  # the assignment (line 6) sets, not reads
