"""A per-thread timeline of a process's kernel compiles, for bench/dropin.py --timeline.

Python imports `sitecustomize` at start-up from the path; bench/dropin.py puts this directory
first on the jobs' PYTHONPATH and sets KILN_TIMELINE_DIR. Each function named in STAGES is
wrapped as its module is first imported, and every call is recorded as (stage, thread, start,
end, cpu): start and end in seconds since the process started, cpu the calling thread's own CPU
seconds in the call (less than end - start by what it waited for: the GIL, the disk, an RPC); at exit the list goes to
KILN_TIMELINE_DIR/timeline-<pid>.json. bench/timeline_report.py summarizes the files.
Without KILN_TIMELINE_DIR nothing is wrapped.

KILN_TIMELINE_SAMPLE names stages (comma-separated, as in the timeline) whose calls are also
sampled: while one runs, a thread reads the calling thread's stack every 5 ms, and the file gets
`samples`, {stage: {"frame;frame;...": count}} (innermost last, as flame graphs take them): what a
stage that takes longer on one rank than another spends its time on.
"""
import atexit
import functools
import gc
import importlib.abc
import json
import os
import sys
import threading
import time

# module -> the functions (or Class.method) whose calls are recorded
STAGES = {
    "torch._inductor.codecache": ["PyCodeCache.load_by_key_path"],
    "kiln.dropin.inductor": ["_compile_triton_here"],
    "kiln.dropin.backward_ahead": ["_compile_backward"],
    "kiln.daemon.artifacts": ["NodeArtifacts.lookup", "NodeArtifacts.get", "NodeArtifacts.put"],
    "kiln.dropin.compile": ["_source_key", "_from_record", "_build", "_published"],
    "kiln.dropin.warm": ["load", "store"],
    "kiln.compiler": ["compile_kernel"],
    "kiln.daemon.tiers": ["cached_compile", "_from_cache", "_from_shared", "_from_daemon", "_compile_here"],
    "kiln.daemon.client": ["Client.compile"],
    # the rank's own pipeline, for the critical path across ranks (timeline_report.py --chain)
    "torch._dynamo.convert_frame": ["_compile"],
    "torch._dynamo.output_graph": ["OutputGraph.call_user_compiler"],
    "torch._dynamo.guards": ["CheckFunctionManager.__init__"],  # a graph's guards, built after its compile
    "torch._inductor.compile_fx": ["compile_fx_inner"],
    "torch._inductor.graph": ["GraphLowering.run", "GraphLowering.codegen"],
    "torch._inductor.async_compile": ["_load_triton_kernel_from_source", "AsyncCompile.wait"],
    "torch._inductor.runtime.triton_heuristics": ["CachingAutotuner.precompile", "CachingAutotuner._precompile_config",
                                                  "CachingAutotuner._make_launchers",
                                                  "CachingAutotuner.benchmark_all_configs"],
}
# stages whose first argument after self names what they did (a cache's namespace): part of the stage's name
LABELLED = {f"kiln.daemon.artifacts.NodeArtifacts.{name}" for name in ("lookup", "get", "put")}


def _install(directory: str) -> None:
    start = time.time()
    events = []

    sampled = set(filter(None, os.environ.get("KILN_TIMELINE_SAMPLE", "").split(",")))
    samples = {}
    watched = {}  # thread ident -> the sampled stage it is in

    stop = threading.Event()

    def sample():
        while not stop.wait(0.005):
            frames = sys._current_frames()
            for ident, stage in list(watched.items()):
                frame, stack = frames.get(ident), []
                while frame is not None and len(stack) < 60:
                    code = frame.f_code
                    stack.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
                    frame = frame.f_back
                key = ";".join(reversed(stack))
                counts = samples.setdefault(stage, {})
                counts[key] = counts.get(key, 0) + 1

    sampler = threading.Thread(target=sample, name="timeline-sampler", daemon=True)
    if sampled:
        sampler.start()

    def timed(fn, stage):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            begin, cpu = time.time(), time.thread_time()
            ident = threading.get_ident()
            outer = ident in watched
            if stage in sampled and not outer:
                watched[ident] = stage
            try:
                return fn(*args, **kwargs)
            finally:
                if stage in sampled and not outer:
                    watched.pop(ident, None)
                label = f"{stage} {args[1]}" if stage in LABELLED and len(args) > 1 and isinstance(args[1], str) else stage
                events.append((label, threading.current_thread().name, begin - start, time.time() - start,
                               time.thread_time() - cpu))
        return call

    def wrap(module):
        for name in STAGES[module.__name__]:
            owner, attr = module, name
            if "." in name:
                owner, attr = getattr(module, name.split(".")[0], None), name.split(".")[1]
            if owner is None or not hasattr(owner, attr):
                continue
            original = getattr(owner, attr)
            wrapped = timed(original, f"{module.__name__}.{name}")
            setattr(owner, attr, wrapped)
            home = sys.modules.get(getattr(original, "__module__", None) or "")
            if owner is module and home is not None and getattr(home, attr, None) is original:
                setattr(home, attr, wrapped)  # imported from there: pickle finds a function by its home's name

    class WrapOnImport(importlib.abc.MetaPathFinder):
        """Finds STAGES' modules through the other finders and wraps them once executed. kiln's
        drop-in hook also asks the other finders, itself among them: a nested call is not ours."""
        inside = threading.local()

        def find_spec(self, name, path, target=None):
            if name not in STAGES or getattr(self.inside, "on", False):
                return None
            self.inside.on = True
            try:
                spec = next((s for f in sys.meta_path if f is not self and hasattr(f, "find_spec")
                             for s in [f.find_spec(name, path, target)] if s is not None), None)
            finally:
                self.inside.on = False
            if spec is None or spec.loader is None:
                return spec
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                wrap(module)
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, WrapOnImport())

    collecting = {}

    def gc_pause(phase, info):
        """The cycle collector's full passes as stages ("gc gen2"): a full pass over a
        heap holding PyTorch and Dynamo's objects can take a good part of a second."""
        if info.get("generation") != 2:  # the younger ones are many and short
            return
        if phase == "start":
            collecting[threading.get_ident()] = time.time(), time.thread_time()
        elif threading.get_ident() in collecting:
            begin, cpu = collecting.pop(threading.get_ident())
            events.append(("gc gen2", threading.current_thread().name, begin - start,
                           time.time() - start, time.thread_time() - cpu))
    gc.callbacks.append(gc_pause)

    @atexit.register
    def write():
        if events:
            with open(os.path.join(directory, f"timeline-{os.getpid()}.json"), "w") as f:
                json.dump({"argv": sys.argv[:2], "start": start, "events": events, "samples": samples}, f)

    @atexit.register  # runs before `write` (last registered, first run)
    def stop_sampling():
        # a daemon thread still running at finalization aborted kiln's ranks on the H200
        # ("terminate called without an active exception"): stopped and joined first
        if sampler.is_alive():
            stop.set()
            sampler.join()


if os.environ.get("KILN_TIMELINE_DIR"):
    _install(os.environ["KILN_TIMELINE_DIR"])
