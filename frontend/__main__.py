"""`python -m kiln` is the `kiln` command (where the script is not on PATH)."""
import sys

from kiln.daemon.cli import main

sys.exit(main())
