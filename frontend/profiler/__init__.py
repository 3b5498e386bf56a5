"""`kiln.profiler`: proton's API (`triton.profiler`) over kiln's own launches.

    import kiln.profiler as proton
    session = proton.start("matmul")          # writes matmul.hatchet at finalize
    with proton.scope("fp16", {"flops16": 2 * M * N * K}):
        kernel[grid](...)
    proton.deactivate(session); ...; proton.activate(session)
    proton.finalize()                           # proton-viewer -m time/ms matmul.hatchet

Every launch while a session is active becomes a frame named after the kernel, under the
frames of the scopes open at the time, with proton's kernel metrics: `time (ns)`, `count`,
`device_id`, `device_type`. Kernel time comes from CUDA events recorded on the launch's
stream around it (read when the session is deactivated or finalized); under KILN_INTERPRET
it is the host time of the interpreted run (device type "CPU"). A scope in which no kiln kernel
ran (a cuBLAS call beside kiln's kernels, which proton would see through CUPTI) gets its own
time, between events on the current stream, in a child frame "(outside kiln)". The file is the hatchet JSON
proton writes: `[tree, devices]`, each node `{"frame": {"name", "type"}, "metrics", "children"}`,
the root carrying a zero of every inclusive metric, then the devices' properties.
"""
from __future__ import annotations

import functools
import itertools
import json
import threading
import time

DEFAULT_PROFILE_NAME = "proton"
_KERNEL_METRICS = ("time (ns)", "count")  # inclusive: the viewer sums them up the tree

_sessions: dict[int, "_Session"] = {}
_active: list["_Session"] = []  # read on every launch (kiln.compiler): empty unless profiling
_local = threading.local()
_ids = itertools.count()


class _Node:
    __slots__ = ("name", "metrics", "children")

    def __init__(self, name):
        self.name, self.metrics, self.children = name, {}, {}

    def child(self, name) -> "_Node":
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = _Node(name)
        return node

    def add(self, metrics: dict):
        for key, value in metrics.items():
            old = self.metrics.get(key)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            self.metrics[key] = old + value if numeric and isinstance(old, (int, float)) else value

    def to_json(self) -> dict:
        return {"frame": {"name": self.name, "type": "function"}, "metrics": dict(self.metrics),
                "children": [c.to_json() for c in self.children.values()]}


class _Session:
    def __init__(self, name: str, hook: str | None):
        self.path = name if name.endswith(".hatchet") else name + ".hatchet"
        self.hook = hook
        self.root = _Node("ROOT")
        self.pending = []  # (node, timing) of launches whose time is not read yet
        self.devices: dict = {}
        self.metric_names: set = set()

    def resolve(self):
        for node, timing in self.pending:
            device_type, device_id, ns = timing.result()
            node.add({"time (ns)": ns, "count": 1, "device_id": str(device_id), "device_type": device_type})
            self.devices.setdefault(device_type, {}).setdefault(str(device_id), _device_info(device_type, device_id))
        self.metric_names.update(_KERNEL_METRICS if self.pending else ())
        self.pending = []

    def to_json(self) -> list:
        """The profile as proton's hatchet JSON: `[tree, devices]`."""
        self.resolve()
        root = self.root.to_json()
        root["metrics"].update({name: 0 for name in sorted(self.metric_names) if name not in root["metrics"]})
        devices = {kind: ids for kind, ids in self.devices.items() if kind != "CPU"}
        return [root, devices]

    def write(self):
        with open(self.path, "w") as f:
            json.dump(self.to_json(), f, indent=4)


def _scope_stack() -> list:
    stack = getattr(_local, "scopes", None)
    if stack is None:
        stack = _local.scopes = []
    return stack


def _node(session: _Session, leaf: str | None = None) -> _Node:
    node = session.root
    for name, _ in _scope_stack():
        node = node.child(name)
    return node.child(leaf) if leaf is not None else node


# --- sessions -----------------------------------------------------------------------

def start(name: str | None = None, *, context: str | None = "shadow", data: str | None = "tree",
          backend: str | None = None, mode=None, hook: str | None = None) -> int:
    """Start a session recording every launch; returns its id. `name` is the file's path
    without its `.hatchet` suffix (default "proton"). kiln has one backend (CUDA events, or
    the interpreter's own clock), the scope-stack context and the tree data structure."""
    if data not in (None, "tree"):
        raise ValueError(f"kiln.profiler records data='tree' only, not {data!r}")
    if context not in (None, "shadow", "python"):
        raise ValueError(f"unknown context {context!r}: 'shadow' or 'python'")
    if mode is not None:
        raise ValueError("kiln.profiler has no profiling modes (proton's 'pcsampling' needs CUPTI)")
    session_id = next(_ids)
    if hook not in (None, "triton"):
        raise ValueError(f"unknown hook {hook!r}: None or 'triton' (frames and metrics from @jit(launch_metadata=))")
    session = _sessions[session_id] = _Session(DEFAULT_PROFILE_NAME if name is None else name, hook)
    _active.append(session)
    return session_id


def _chosen(session: int | None) -> list:
    if session is None:
        return list(_sessions.values())
    if session not in _sessions:
        raise ValueError(f"no profiling session {session}")
    return [_sessions[session]]


def activate(session: int | None = None) -> None:
    """Record launches again in `session` (every session when None)."""
    for s in _chosen(session):
        if s not in _active:
            _active.append(s)


def deactivate(session: int | None = None, flushing: bool = False) -> None:
    """Stop recording in `session` (every session when None); its data stays for finalize. Its
    launches' times are always read here, so `flushing` (Triton 3.9's) asks for nothing more."""
    for s in _chosen(session):
        if s in _active:
            _active.remove(s)
        s.resolve()


def finalize(session: int | None = None, output_format: str | None = "hatchet") -> None:
    """Write `session`'s profile (every session's when None) and end it."""
    if output_format not in (None, "", "hatchet"):
        raise ValueError(f"kiln.profiler writes the 'hatchet' format only, not {output_format!r}")
    ids = list(_sessions) if session is None else [session]
    for s, session_id in zip(_chosen(session), ids):
        deactivate(session_id)
        s.write()
        del _sessions[session_id]


def profile(func=None, *, name=None, context="shadow", data="tree", backend=None, mode=None, hook=None):
    """`@profile`: a session started for each call of the function and deactivated after it."""
    def decorate(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            session = start(name, context=context, data=data, backend=backend, mode=mode, hook=hook)
            try:
                return f(*args, **kwargs)
            finally:
                deactivate(session)
        return wrapper
    return decorate if func is None else decorate(func)


# --- scopes -------------------------------------------------------------------------

# The frame under a scope that holds the GPU time of a scope in which no kiln kernel ran (a
# cuBLAS call proton would see through CUPTI): its whole time, between events on the stream.
OUTSIDE_KILN = "(outside kiln)"


def _measured() -> int:
    """How many launches and scope timings this thread has filed (a scope with none inside
    files its own time)."""
    return getattr(_local, "measured", 0)


def _count_measured() -> None:
    _local.measured = _measured() + 1


def _scope_timers() -> list:
    timers = getattr(_local, "scope_timers", None)
    if timers is None:
        timers = _local.scope_timers = []
    return timers


def _start_scope_timer():
    if not _active:
        return None
    from kiln import config
    if config.interpret():
        return _HostTiming()
    from kiln.runtime import cuda_driver as drv
    if not drv.is_available():
        return None
    return _EventTiming(drv.device_and_stream()[1])


def enter_scope(name: str, *, metrics: dict | None = None) -> int | None:
    """Open a scope: launches until `exit_scope` become its children; `metrics` are added to it."""
    stack = _scope_stack()
    stack.append((name, metrics))
    _scope_timers().append((_start_scope_timer(), _measured()))
    for session in _active:
        node = _node(session)
        if metrics:
            node.add(metrics)
            session.metric_names.update(metrics)
    return len(stack)


def exit_scope(name: str | None = None, *, metrics: dict | None = None) -> int | None:
    stack = _scope_stack()
    if not stack:
        raise ValueError("exit_scope without an open scope")
    if name and name != stack[-1][0]:
        raise ValueError(f"Scope name mismatch: {name} != {stack[-1][0]}")
    if metrics:
        for session in _active:
            _node(session).add(metrics)
            session.metric_names.update(metrics)
    timers = _scope_timers()
    timer, measured = timers.pop() if timers else (None, 0)
    if timer is not None and _measured() == measured and _active:
        timer.stop()
        for session in _active:
            session.pending.append((_node(session, OUTSIDE_KILN), timer))
        _count_measured()
    elif timer is not None:
        timer.discard()  # its launches carry the time
    depth = len(stack)
    stack.pop()
    return depth


class scope:
    """`with scope(name, metrics):` or `@scope(name, metrics)`: a named frame around launches."""

    def __init__(self, name: str, metrics: dict | None = None):
        self.name, self.metrics = name, metrics

    def __enter__(self):
        enter_scope(self.name, metrics=self.metrics)
        return self

    def __exit__(self, *exc):
        exit_scope(self.name)
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)
        return wrapper


class cpu_timed_scope(scope):
    """A scope that also records its host time as `cpu_time (ns)`."""

    def __init__(self, name: str, metrics: dict | None = None):
        if metrics and "cpu_time" in metrics:
            raise ValueError("The metric name 'cpu_time' is reserved.")
        super().__init__(name, metrics)

    def __enter__(self):
        self.start_ns = time.perf_counter_ns()
        return super().__enter__()

    def __exit__(self, *exc):
        elapsed = time.perf_counter_ns() - self.start_ns
        exit_scope(self.name, metrics={"cpu_time (ns)": elapsed})
        return False


# --- measuring launches (called by kiln.compiler.CompiledKernel.launch) --------------

class _HostTiming:
    """An interpreted launch (or a scope under the interpreter), timed on the host clock."""

    def __init__(self):
        self.begin = time.perf_counter_ns()

    def stop(self):
        self.ns = time.perf_counter_ns() - self.begin

    def discard(self):
        pass

    def result(self):
        return "CPU", 0, self.ns


class _EventTiming:
    """GPU work between two CUDA events on a stream; read once the end event completes."""

    def __init__(self, stream: int):
        from kiln.runtime import cuda_driver as drv
        cu, self.device, self.stream = drv.cuda(), drv.device_and_stream()[0], stream
        self.start, self.end = (drv.check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        self.read = None
        drv.check(cu.cuEventRecord(self.start, stream), "cuEventRecord")

    def stop(self):
        from kiln.runtime import cuda_driver as drv
        drv.check(drv.cuda().cuEventRecord(self.end, self.stream), "cuEventRecord")

    def discard(self):
        from kiln.runtime import cuda_driver as drv
        for event in (self.start, self.end):
            drv.check(drv.cuda().cuEventDestroy(event), "cuEventDestroy")

    def result(self):
        if self.read is None:  # one timing may be filed in several sessions
            from kiln.runtime import cuda_driver as drv
            cu = drv.cuda()
            drv.check(cu.cuEventSynchronize(self.end), "cuEventSynchronize")
            ms = drv.check(cu.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime")
            for event in (self.start, self.end):
                drv.check(cu.cuEventDestroy(event), "cuEventDestroy")
            self.read = ("CUDA", self.device, int(round(ms * 1e6)))
        return self.read


_HOOK_METRICS = ("flops8", "flops16", "flops32", "flops64", "bytes", "flops")  # what proton's launch hook keeps


def measure(kernel, grid, args, run, stream: int | None, interpreted: bool) -> None:
    """Launch `kernel` (`run()`) under the active sessions' timer and file it under the open
    scopes. In a session started with hook="triton" the kernel's frame sits under an op frame
    named by its @jit(launch_metadata=) function (or after the kernel), which takes that
    function's flops and bytes metrics, as proton's launch hook does."""
    op_name, op_metrics = kernel.name, {}
    if any(s.hook == "triton" for s in _active) and kernel.launch_metadata is not None:
        metadata = kernel.launch_metadata(grid, kernel, kernel.arguments_by_name(args))
        op_name = metadata.get("name", kernel.name)
        op_metrics = {k: metadata[k] for k in _HOOK_METRICS if k in metadata}
    timing = _HostTiming() if interpreted else _EventTiming(stream or 0)
    run()
    timing.stop()
    _count_measured()
    for session in _active:
        if session.hook == "triton":
            op = _node(session, op_name)
            op.add(op_metrics)
            session.metric_names.update(op_metrics)
            node = op.child(kernel.name)
        else:
            node = _node(session, kernel.name)
        session.pending.append((node, timing))


def _device_info(device_type: str, device_id: int) -> dict:
    """The properties proton's viewer reads for its utilization metrics."""
    if device_type != "CUDA":
        return {}
    from kiln.runtime import cuda_driver as drv
    props = {key: drv._device_attribute(device_id, f"CU_DEVICE_ATTRIBUTE_{attr}") for key, attr in (
        ("clock_rate", "CLOCK_RATE"), ("memory_clock_rate", "MEMORY_CLOCK_RATE"),
        ("bus_width", "GLOBAL_MEMORY_BUS_WIDTH"), ("num_sms", "MULTIPROCESSOR_COUNT"))}
    props["arch"] = drv.target(device_id)[3:].rstrip("a")
    return props


from . import data  # noqa: E402  (proton.data: reads the sessions above)
