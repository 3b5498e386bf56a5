"""What `kiln.tools.compile` writes and `kiln.tools.link` reads: ahead-of-time kernels as C source.

One compiled specialization is a `.c` file holding its cubin and PTX with `load_`, `unload_` and a
launch function, and a `.h` declaring them. The header also carries one `// kiln-aot:` line, a JSON
object (`AotKernel`), from which the linker writes its dispatchers; it is parsed and validated
field by field, never executed.

The C functions and their names are Triton's (`<out>_<hash>_<suffix>`, `load_<out>_<hash>_<suffix>`,
...), so C code written against Triton's ahead-of-time kernels links against kiln's. The argument
types are kiln's ABI, what the kernel reads: an fp32 scalar is a `float` (Triton's prototype says
`double`, which the kernel reads wrongly), an fp16 or bf16 scalar a `float` rounded to 16 bits
(to nearest even) on its way into the launch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

MARK = "// kiln-aot: "
HINTS = (None, 1, 16)  # an argument's specialization: none, equal to 1 (a constant), divisible by 16

# Triton's signature type -> the C type of the launch function's argument.
C_TYPES = {"i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
           "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
           "fp16": "float", "bf16": "float", "fp32": "float", "f32": "float", "fp64": "double"}
POINTER = "CUdeviceptr"
# Signature types the kernel reads as 16 bits, and the C function of this module's source that rounds to them.
HALF_ROUNDING = {"fp16": "kiln_fp16_bits", "bf16": "kiln_bf16_bits"}
# Bytes of each C type, to check a kernel parameter's width against its argument's.
C_BYTES = {"int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4, "uint32_t": 4,
           "int64_t": 8, "uint64_t": 8, "float": 4, "double": 8, POINTER: 8}

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_HASH = re.compile(r"[0-9a-f]{8}")
_SUFFIX = re.compile(r"(\d+[cd])*")

# The C functions rounding a float to fp16's or bf16's bits, to nearest even (as a cast in C or in a
# kernel would), NaN kept NaN; a kernel's .c holds those its arguments need.
HALF_ROUNDING_SOURCE = {"kiln_fp16_bits": r"""
static uint16_t kiln_fp16_bits(float value) {
    uint32_t x, magnitude, sign;
    memcpy(&x, &value, sizeof x);
    sign = (x >> 16) & 0x8000u;
    magnitude = x & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (magnitude >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);  /* 2^16 and above: infinity */
    if (magnitude < 0x38800000u) {  /* below 2^-14: a subnormal fp16, m * 2^-24 */
        uint32_t exponent = magnitude >> 23, m, shift, rest, half;
        if (exponent < 102) return (uint16_t)sign;  /* below 2^-25: zero */
        m = (magnitude & 0x7fffffu) | 0x800000u;
        shift = 126 - exponent;
        rest = m & ((1u << shift) - 1u);
        half = 1u << (shift - 1);
        m >>= shift;
        if (rest > half || (rest == half && (m & 1u))) m += 1;  /* 0x400 is the smallest normal */
        return (uint16_t)(sign | m);
    }
    {
        uint32_t bits = (magnitude - 0x38000000u) >> 13, rest = magnitude & 0x1fffu;  /* exponent rebiased */
        if (rest > 0x1000u || (rest == 0x1000u && (bits & 1u))) bits += 1;  /* a carry rounds up to inf */
        return (uint16_t)(sign | bits);
    }
}
""", "kiln_bf16_bits": r"""
static uint16_t kiln_bf16_bits(float value) {
    uint32_t x;
    memcpy(&x, &value, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  /* NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
"""}


class AotError(ValueError):
    """A signature, grid or header the ahead-of-time tools cannot take; the message says which."""


@dataclass(frozen=True)
class AotArg:
    """One argument of a kernel's full C signature: its C type, name and specialization
    (`hint`: None, 1 — the specialized function takes no such argument — or 16)."""
    ctype: str
    name: str
    hint: int | None = None


@dataclass(frozen=True)
class AotKernel:
    """One compiled specialization as its header describes it to the linker: `name` the out
    name, `sig_hash` and `suffix` the rest of its function's name, `algo` what tells its
    constants and launch options from another compile's, `args` its full signature."""
    name: str
    sig_hash: str
    suffix: str
    algo: str
    args: tuple

    @property
    def function(self) -> str:
        return f"{self.name}_{self.sig_hash}_{self.suffix}"

    @property
    def passed(self) -> tuple:
        """The arguments the specialized function takes: all but those specialized to 1."""
        return tuple(a for a in self.args if a.hint != 1)

    @property
    def specializations(self) -> int:
        return sum(a.hint is not None for a in self.args)

    def line(self) -> str:
        record = {"name": self.name, "hash": self.sig_hash, "suffix": self.suffix, "algo": self.algo,
                  "args": [[a.ctype, a.name, a.hint] for a in self.args]}
        return MARK + json.dumps(record, separators=(",", ":"))


def c_type(ty: str) -> str:
    """The C type a launch takes for signature type `ty` (`*fp16`, `i32`, ...)."""
    if ty.startswith("*"):
        return POINTER
    if ty not in C_TYPES:
        raise KeyError(f"no C type for the signature type {ty!r}")
    return C_TYPES[ty]


def prototype(args) -> str:
    """`CUdeviceptr C, int32_t M, ...` for C (`void` for none)."""
    return ", ".join(f"{a.ctype} {a.name}" for a in args) or "void"


def stream_prototype(args) -> str:
    """The launch functions' parameters: the stream, then `args`."""
    return ", ".join(["CUstream stream", *(f"{a.ctype} {a.name}" for a in args)])


def c_word(value) -> str:
    """A constant's value as part of a C name: 0.5 -> 0p5, -2 -> m2."""
    text = str(value).replace("-", "m").replace(".", "p").replace("+", "")
    return re.sub(r"\W", "_", text)


def read_header(text: str, origin: str = "header") -> list:
    """The AotKernels whose `// kiln-aot:` lines `text` holds (kiln.tools.compile's headers), each
    field checked: a malformed line is an AotError naming `origin`."""
    kernels = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(MARK):
            kernels.append(_parse(line[len(MARK):], f"{origin}:{number}"))
    return kernels


def _parse(payload: str, where: str) -> AotKernel:
    try:
        record = json.loads(payload)
    except ValueError as e:
        raise AotError(f"{where}: the kiln-aot line is not JSON ({e})") from None
    if not isinstance(record, dict) or set(record) != {"name", "hash", "suffix", "algo", "args"}:
        raise AotError(f"{where}: the kiln-aot line needs exactly name, hash, suffix, algo and args")
    name, sig_hash, suffix, algo, args = (record[k] for k in ("name", "hash", "suffix", "algo", "args"))
    for field, value, pattern in (("name", name, _IDENTIFIER), ("hash", sig_hash, _HASH), ("suffix", suffix, _SUFFIX),
                                  ("algo", algo, re.compile(r"\w+"))):
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise AotError(f"{where}: bad {field} {value!r:.60}")
    if not isinstance(args, list):
        raise AotError(f"{where}: args is not a list")
    parsed = []
    for entry in args:
        if not (isinstance(entry, list) and len(entry) == 3 and entry[0] in C_BYTES and isinstance(entry[1], str)
                and _IDENTIFIER.fullmatch(entry[1]) and entry[2] in HINTS and not isinstance(entry[2], bool)):
            raise AotError(f"{where}: bad argument {entry!r:.60} (a C type, a name, a hint of null, 1 or 16)")
        parsed.append(AotArg(*entry))
    return AotKernel(name, sig_hash, suffix, algo, tuple(parsed))
