"""`triton.runtime.errors` under kiln's names: the errors a launch can raise."""
from ..errors import InterpreterError, KilnError as TritonError, OutOfResources  # noqa: F401
