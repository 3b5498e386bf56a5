"""`triton.runtime.errors` under kiln's names: the errors a launch can raise."""
from ..errors import AutotunerError, InterpreterError, KilnError as TritonError, OutOfResources, PTXASError  # noqa: F401
