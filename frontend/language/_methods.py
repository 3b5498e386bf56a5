"""The functions Triton also offers as tensor methods (`x.sum(0)`, `x.reshape(...)`)."""
from . import builtins, sorting, standard

METHODS = {name: getattr(mod, name) for mod, names in (
    (builtins, ["reshape", "view", "permute", "trans", "broadcast_to", "expand_dims", "ravel", "split", "join",
                "reduce", "associative_scan", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
                "erf", "floor", "ceil", "abs", "cast", "store", "load", "fma", "sqrt_rn", "atomic_add",
                "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor", "atomic_xchg", "atomic_cas",
                "atomic_load", "atomic_store",
                "gather", "histogram", "item"]),
    (standard, ["sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce_or", "cumsum", "cumprod", "sigmoid",
                "softmax", "cdiv"]),
    (sorting, ["flip", "sort", "topk"]),
) for name in names}
# x.exp(), x.sqrt(), ...: Triton registers these methods before its fp32/fp64 check, so they take fp16 too
METHODS.update({name: fn.method for name, fn in METHODS.items() if hasattr(fn, "method")})
