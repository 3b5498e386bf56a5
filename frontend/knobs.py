"""`kiln.knobs` is the drop-in's knobs module (`triton.knobs`): one module under both names, so a
knob set through either is set for both."""
import sys

from kiln.dropin import knobs as _knobs

sys.modules[__name__] = _knobs
