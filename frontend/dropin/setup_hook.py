"""Build step (pyproject.toml's [tool.setuptools.cmdclass]): installs `kiln-dropin.pth` into
site-packages, beside the package, for wheels and editable installs alike.

The .pth line runs at every start of that environment's Python; it only reads KILN_DROPIN and,
when set, imports `_kiln_dropin` (boot.py, installed beside it), which loads kiln.dropin.hook.
This module is loaded by setuptools from its file and imports nothing of kiln.
"""
import os

from setuptools.command.build_py import build_py as _build_py

PTH_NAME = "kiln-dropin.pth"
BOOT_NAME = "_kiln_dropin.py"
PTH_LINE = "import os; os.environ.get('KILN_DROPIN') and __import__('_kiln_dropin')\n"


class build_py(_build_py):
    def run(self):
        super().run()
        # An editable install's wheel is built from the `install` command's directory; a
        # regular wheel from build_lib (setuptools' editable_wheel sets both up).
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, PTH_NAME), "w") as f:
            f.write(PTH_LINE)
        self.copy_file(os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot.py"), os.path.join(root, BOOT_NAME))
        self._extra = [os.path.join(root, PTH_NAME), os.path.join(root, BOOT_NAME)]

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else outputs + getattr(self, "_extra", [])
