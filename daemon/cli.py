"""`kiln daemon start|stop|status`, `kiln prewarm`, `kiln cache stats|ls|prune|clear|export|import`,
`kiln run -- CMD` and `kiln doctor`. `python -m kiln` is `kiln`.

    kiln daemon start [--foreground] [--listen HOST:PORT] [--workers N] [--metrics [HOST:]PORT]
    kiln daemon status [--json]      exits 0 running, 3 not running, 1 dead with its pid file left,
                                     4 unknown (it runs but will not answer us), as LSB init scripts do
    kiln prewarm --from-manifest run.jsonl --target sm_90a --target sm_100a [--json]
    kiln prewarm my_kernels.py --target sm_90a    (or a module's dotted name)
    kiln cache stats [--zero] [--json]
    kiln cache export kernels.zip [--json]

A mistake on the command line is one line on stderr and exit code 2, as argparse's own.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import select
import signal
import sys
import threading
import time

from kiln.cache import Cache, env, paths

from . import launch

READY_TIMEOUT_S = 120.0  # how long `start --listen` waits for the background daemon to serve


class UsageError(Exception):
    """A command line argparse cannot judge alone (options that go together, files that cannot
    be read): reported as argparse reports its own, with exit code 2."""


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = args.run(args)
        sys.stdout.flush()
        return code
    except UsageError as e:
        args.parser.print_usage(sys.stderr)
        print(f"{args.parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kiln cache ls | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and the exit's flush goes nowhere
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln's compile daemon and node cache")
    import kiln  # the package's version; the daemon's modules import nothing of the frontend's at load
    parser.add_argument("--version", action="version", version=f"kiln {kiln.__version__}")
    groups = _commands(parser, "group")

    daemon = _commands(groups.add_parser("daemon", help="the node-wide compile daemon"), "action")
    start = _command(daemon, "start", _start, "start the daemon (in the background unless --foreground)")
    start.add_argument("--foreground", action="store_true", help="serve in this process (systemd, containers)")
    start.add_argument("--listen", metavar="HOST:PORT", type=_host_port,
                       help="serve on TCP (clients must present the token); port 0: any free port, printed")
    start.add_argument("--socket", metavar="PATH", help="the Unix socket (default: the node daemon's)")
    start.add_argument("--workers", type=_at_least(1, int), default=None, metavar="N",
                       help="compile worker processes (default: cores)")
    start.add_argument("--compile-fn", default=None, help="module:function the workers call")
    start.add_argument("--compile-timeout", type=_above_zero, default=300.0, metavar="SECONDS",
                       help="seconds before a compile is killed")
    start.add_argument("--idle-exit", type=_at_least(0, float), default=0, metavar="SECONDS",
                       help="exit after this many idle seconds (0: never)")
    start.add_argument("--metrics", metavar="[HOST:]PORT", type=_metrics_address,
                       help="also serve Prometheus metrics at /metrics (host default 127.0.0.1)")
    start.add_argument("--tls-cert", metavar="PEM", help="with --listen: serve TLS with this certificate chain")
    start.add_argument("--tls-key", metavar="PEM", help="with --listen: the certificate's private key")
    start.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)  # where a background daemon says it serves
    stop = _command(daemon, "stop", _stop, "stop the node daemon, letting compiles in flight finish")
    stop.add_argument("--socket", metavar="PATH", help="the daemon started with --socket PATH")
    stop.add_argument("--address", metavar="HOST:PORT", help="the daemon started with --listen HOST:PORT")
    status = _command(daemon, "status", _status, "workers, queue, hits and misses, compile latency")
    status.add_argument("--address", help="the daemon (default: KILN_DAEMON or the node daemon)")
    status.add_argument("--json", action="store_true", help="a JSON document, also when no daemon answers")
    status.add_argument("--tls-ca", metavar="PEM", help="the CA of a TLS daemon (default: KILN_DAEMON_TLS_CA)")

    prewarm = _command(groups, "prewarm", _prewarm, "compile kernels through the daemon before a run needs them")
    source = prewarm.add_mutually_exclusive_group(required=True)
    source.add_argument("source", nargs="?", metavar="MODULE_OR_FILE",
                        help="a module (dotted name) or .py file: its kernels' declared signatures x autotune configs")
    source.add_argument("--from-manifest", metavar="FILE", help="the JSON lines a run recorded")
    source.add_argument("--from-cache", action="store_true", help="every kernel the node cache keeps the IR of; with a "
                        "shared tier, its torch.compile graphs and autotuning choices go there too")
    prewarm.add_argument("--target", action="append", default=[],
                         help="compile for this target (repeatable; default: the local GPU's, or each kernel's own)")
    prewarm.add_argument("--address", help="the daemon (default: KILN_DAEMON or the node daemon)")
    prewarm.add_argument("--tls-ca", metavar="PEM", help="the CA of a TLS daemon (default: KILN_DAEMON_TLS_CA)")
    prewarm.add_argument("--json", action="store_true")

    run = _command(groups, "run", _run, "run a command with `import triton` resolved to kiln (drop-in mode)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    doctor = _command(groups, "doctor", _doctor,
                      "check the driver, toolkit, cache, daemon, shared tier and drop-in, each with its fix")
    doctor.add_argument("--json", action="store_true")

    cache = _commands(groups.add_parser("cache", help="the node cache"), "action")
    for name, run, help_text in (("stats", _cache_stats, "hit rate, size and counts"), ("ls", _cache_ls, "every entry"),
                                 ("prune", _cache_prune, "drop orphans, enforce the size limit"),
                                 ("clear", _cache_clear, "empty the cache"),
                                 ("export", _cache_export, "write entries and their IR to a zip archive"),
                                 ("import", _cache_import, "read an archive written by export")):
        sub = _command(cache, name, run, help_text)
        sub.add_argument("--dir", help="the cache directory (default: KILN_CACHE_DIR or ~/.cache/kiln)")
        if name in ("export", "import"):
            sub.add_argument("file")
        if name == "stats":
            sub.add_argument("--zero", action="store_true", help="then zero the counters (as ccache -z)")
        sub.add_argument("--json", action="store_true")
    return parser


def _commands(parser: argparse.ArgumentParser, dest: str):
    """`parser`'s subcommands; naming none prints its help and exits 2."""
    parser.set_defaults(run=_no_command, parser=parser)
    return parser.add_subparsers(dest=dest, metavar="COMMAND")


def _command(commands, name: str, run, help_text: str) -> argparse.ArgumentParser:
    sub = commands.add_parser(name, help=help_text, description=help_text)
    sub.set_defaults(run=run, parser=sub)
    return sub


def _no_command(args) -> int:
    prog = args.parser.prog
    args.parser.print_help(sys.stderr)
    print(f"\n{prog}: error: name a command, e.g. {_example(prog)} ({prog} COMMAND -h for its options)",
          file=sys.stderr)
    return 2


def _example(prog: str) -> str:
    return {"kiln": "`kiln daemon status`, `kiln cache stats` or `kiln doctor`",
            "kiln daemon": "`kiln daemon status`", "kiln cache": "`kiln cache stats`"}.get(prog, f"`{prog} -h`")


# --- command-line values, checked by argparse (a bad one: its one-line error, exit 2) ------

def _port(port: str, text: str) -> int:
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: {port!r} is not a port (0 to 65535)")
    return int(port)


def _host_port(text: str) -> str:
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"{text!r}: give HOST:PORT, e.g. 0.0.0.0:7411 (port 0: any free port)")
    _port(port, text)
    return text


def _metrics_address(text: str) -> str:
    """PORT or HOST:PORT, as HOST:PORT (host 127.0.0.1: metrics stay on this node unless asked)."""
    host, _, port = text.rpartition(":")
    return f"{host or '127.0.0.1'}:{_port(port, text)}"


def _at_least(minimum, kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number "
                                             f"of {minimum} or more")
        return value
    return parse


def _above_zero(text: str) -> float:
    value = _at_least(0, float)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not a number above 0")
    return value


# --- drop-in mode (kiln.dropin) ------------------------------------------------------------

def _run(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("kiln run: give the command after --, e.g. kiln run -- torchrun --nproc-per-node 8 train.py",
              file=sys.stderr)
        return 2
    from kiln.dropin import doctor, hook
    if doctor.installed_hook() is None:
        print(f"kiln run: kiln's drop-in hook is not installed in {sys.executable}'s site-packages: reinstall "
              "kiln (pip install -e . in a checkout)", file=sys.stderr)
        return 2
    os.environ[hook.ENV] = "1"  # the job and every process it starts (they inherit it)
    advice = doctor.torchrun_advice(command, env.environment())
    if advice:
        print(advice, file=sys.stderr)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"kiln run: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


def _doctor(args) -> int:
    """0 when nothing is broken (warnings allowed: no driver is a compile-only node), else 1."""
    from kiln.dropin import doctor
    report = doctor.report()
    checks = [*doctor.node_checks(), doctor.dropin_check(report)]
    broken = any(c["status"] == doctor.FAIL for c in checks)
    if args.json:
        print(json.dumps({**report, "checks": checks, "ok": not broken}, indent=2))
    else:
        print(f"{doctor.format_report(report)}\n\n{doctor.format_checks(checks)}")
    return 1 if broken else 0


# --- daemon -------------------------------------------------------------------------------

def _start(args) -> int:
    _check_tls(args)
    if args.foreground:
        return serve(args)
    forwarded = _forwarded(args)
    if args.listen:
        return _start_in_background(forwarded)
    address = f"unix:{args.socket}" if args.socket else None
    try:
        print("kiln daemon serving at", launch.ensure_daemon(forwarded, idle_exit=args.idle_exit, address=address))
    except (RuntimeError, OSError) as e:  # it did not start (its log says why), or an unsafe runtime directory
        print(f"kiln daemon start: {e}", file=sys.stderr)
        return 1
    return 0


def _check_tls(args) -> None:
    """Refuse half a TLS pair, TLS without TCP, and files that are no PEM, before anything starts."""
    if not (args.tls_cert or args.tls_key):
        return
    if not (args.tls_cert and args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if not args.listen:
        raise UsageError("--tls-cert and --tls-key serve TCP: add --listen HOST:PORT")
    from .tls import TLSError, server_credentials
    try:
        server_credentials(args.tls_cert, args.tls_key)
    except TLSError as e:
        raise UsageError(str(e)) from None


def _forwarded(args) -> list[str]:
    """The options of `start` again, for the background process that serves."""
    out = ["--compile-timeout", str(args.compile_timeout)]
    for flag, value in (("--socket", args.socket), ("--listen", args.listen), ("--workers", args.workers),
                        ("--compile-fn", args.compile_fn), ("--metrics", args.metrics),
                        ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if value:
            out += [flag, str(value)]
    return out


def _start_in_background(forwarded: list[str]) -> int:
    """Start a TCP daemon in the background and print the address it serves: with port 0, the
    port it was given. It writes that address down a pipe once it serves; its exit before
    then closes the pipe unwritten."""
    read_end, write_end = os.pipe()
    try:
        launch.spawn_daemon([*forwarded, "--ready-fd", str(write_end)], pass_fds=(write_end,))
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as ready:
        said = select.select([ready], [], [], READY_TIMEOUT_S)[0]
        address = ready.readline().strip() if said else None
    if address is None:
        print(f"kiln daemon start: no word from the daemon within {READY_TIMEOUT_S:.0f} s; see {launch.log_file()}",
              file=sys.stderr)
        return 1
    if not address:
        print(f"kiln daemon start: the daemon did not start: {_last_line(launch.log_file())} "
              f"(more in {launch.log_file()})", file=sys.stderr)
        return 1
    where = "KILN_DAEMON_TOKEN" if env.daemon_token() else launch.token_file()
    clear = "" if "--tls-cert" in forwarded else ", over plaintext only with KILN_DAEMON_PLAINTEXT_TOKEN=1"
    print(f"kiln daemon serving at {address} (clients present the token in {where}{clear})")
    return 0


def _last_line(path) -> str:
    """The log's last line, from its event on (its time and level said already)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    last = lines[-1] if lines else "(empty log)"
    return last[last.find("event="):] if "event=" in last else last


def serve(args) -> int:
    from .server import DEFAULT_COMPILE_FN, create_server

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    log = logging.getLogger("kiln.daemon")
    token = tls = made_token = None
    if args.listen:
        address = args.listen
        token = env.daemon_token() or (made_token := secrets.token_urlsafe(32))
        if args.tls_cert:
            from .tls import server_credentials
            tls = server_credentials(args.tls_cert, args.tls_key)
        else:
            log.warning("event=plaintext_tcp address=%s note='the token and kernels cross the network in clear; "
                        "serve TLS with --tls-cert and --tls-key'", address)
    else:
        address = f"unix:{args.socket}" if args.socket else launch.default_address()
    try:
        server, port = create_server(address, args.compile_fn or DEFAULT_COMPILE_FN, workers=args.workers,
                                     compile_timeout=args.compile_timeout, token=token, tls=tls,
                                     remote_cache=env.remote_cache_url())
    except (RuntimeError, OSError) as e:  # the address is taken or cannot be bound: one line, not a traceback
        log.error("event=start_failed address=%s error=%r", address, str(e))
        return 1
    if made_token:  # written once bound: a start that fails leaves the serving daemon's token in place
        _leave_token(made_token)
    metrics = None
    if args.metrics:
        from .metrics import serve_metrics
        host, _, metrics_port = args.metrics.rpartition(":")
        try:  # before the first compile, which the latency histogram must see
            metrics = serve_metrics(server.service, host, int(metrics_port))
        except OSError as e:
            log.error("event=start_failed metrics=%s error=%r", args.metrics, str(e))
            server.pool.close()
            return 1
        log.info("event=metrics address=%s:%d", *metrics.server_address[:2])
    server.start()
    if args.listen:
        address = f"{args.listen.rsplit(':', 1)[0]}:{port}"
    pid_file = launch.pid_file(address)
    paths.socket_dir(pid_file.parent)
    pid_file.write_text(json.dumps({"pid": os.getpid(), "address": address}))
    log.info("event=serving address=%s tls=%s workers=%d pid=%d remote_cache=%s", address, tls is not None,
             server.pool.size, os.getpid(), server.service.remote.where if server.service.remote else "none")
    if args.ready_fd is not None:  # `kiln daemon start` waits for this line
        os.write(args.ready_fd, f"{address}\n".encode())
        os.close(args.ready_fd)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        if args.idle_exit and server.service.idle_for() > args.idle_exit:
            log.info("event=idle_exit idle_s=%.0f", server.service.idle_for())
            break
    log.info("event=stopping")
    server.stop(grace=30)
    if metrics is not None:
        metrics.shutdown()
    if (launch.read_pid_file(address) or {}).get("pid") == os.getpid():
        pid_file.unlink(missing_ok=True)
    log.info("event=stopped")
    return 0


def _leave_token(token: str) -> None:
    """Leave the token this daemon made for clients, in a 0600 file beside the socket."""
    paths.private_dir(env.runtime_dir())
    path = launch.token_file()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    logging.getLogger("kiln.daemon").info("event=token_written path=%s", path)


def _stop(args) -> int:
    """Exit codes as LSB's `stop`: 0 once no daemon runs (also when none ran), 1 when it would
    not stop, 4 when it is not this user's to stop."""
    address = f"unix:{args.socket}" if args.socket else args.address
    info = launch.read_pid_file(address)
    if info is None:
        print("no kiln daemon is running" + ("" if address else _others()))
        return 0
    try:
        os.kill(info["pid"], signal.SIGTERM)
    except ProcessLookupError:
        launch.pid_file(address).unlink(missing_ok=True)
        print("no kiln daemon is running (removed a stale pid file)")
        return 0
    except PermissionError:
        print(f"kiln daemon stop: process {info['pid']} is not this user's to stop", file=sys.stderr)
        return 4
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not _running(info["pid"]):
            print(f"kiln daemon {info['pid']} stopped")
            return 0
        time.sleep(0.1)
    print(f"kiln daemon {info['pid']} did not stop within 60 s", file=sys.stderr)
    return 1


def _running(pid: int) -> bool:
    """Is process `pid` still running? One that exited but that its parent (the process
    that spawned the daemon, kiln.daemon.launch) has not waited for yet is a zombie: it has
    stopped, though signal 0 still reaches it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process, alive
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # the state follows the command name
    except (OSError, IndexError):
        return True  # no /proc (not Linux): signal 0 is all there is


def _others() -> str:
    """The daemons other than the node daemon that this user runs here, and how to name them."""
    others = launch.other_daemons()
    return "".join(f"\n  one listens at {a} (pid {pid}): kiln daemon stop --address {a}" for a, pid in others)


# LSB status codes (init scripts, systemd's `status`)
RUNNING, DEAD_WITH_PID_FILE, NOT_RUNNING, UNKNOWN = 0, 1, 3, 4


def _status(args) -> int:
    from google.protobuf.json_format import MessageToDict

    address = args.address or launch.configured_address()
    if address is None:
        stats, problem, code = None, "KILN_DAEMON=off: this environment uses no daemon", NOT_RUNNING
    else:
        stats, problem, code = _daemon_stats(address, args.tls_ca or env.daemon_tls_ca())
    if stats is None:
        if args.json:
            print(json.dumps({"running": False, "address": address, "status": code, "error": problem}, indent=1))
        else:
            print(f"no kiln daemon answers at {address}: {problem}" if address else problem, file=sys.stderr)
        return code
    if args.json:
        doc = MessageToDict(stats, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        for part in (doc, doc["cache"], doc["remote_cache"], doc["claims"]):  # protobuf's JSON spells 64-bit integers as strings
            part.update({k: int(v) for k, v in part.items() if isinstance(v, str) and v.isdigit()})
        print(json.dumps({"running": True, "address": address, **doc}, indent=1))
        return RUNNING
    print(_status_text(address, stats))
    return RUNNING


def _daemon_stats(address: str, tls_ca):
    """(the daemon's StatsResponse, None, RUNNING), or (None, why not, its LSB status code)."""
    import grpc

    from .client import Client, PlaintextToken
    from .tls import TLSError

    hint = _others() if address == launch.default_address() else ""
    if address.startswith("unix:") and not launch.listening(address[len("unix:"):]):
        return None, f"not running{hint}", _silent_code(address)  # no socket (or a dead one's): no call to wait for
    token = env.daemon_token() or launch.own_token(address)
    try:
        with Client(address, token=token, tls_ca=tls_ca) as client:
            return client.stats(), None, RUNNING
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:  # it runs, and keeps its numbers to itself
            return None, (f"UNAUTHENTICATED; it wants its token in KILN_DAEMON_TOKEN (a daemon of yours started "
                          f"with --listen leaves it in {launch.token_file()})"), UNKNOWN
        return None, f"{e.code().name}{hint}", _silent_code(address)
    except (paths.UnsafePathError, PlaintextToken) as e:
        return None, str(e), UNKNOWN
    except TLSError as e:
        raise UsageError(str(e)) from None


def _silent_code(address: str) -> int:
    """The status of a daemon that did not answer, by its pid file: none, not running; its
    process gone, dead with its pid file left; its process alive, unknown (it may speak TLS,
    or be too busy to answer)."""
    info = launch.read_pid_file(address)
    if info is None:
        return NOT_RUNNING
    return UNKNOWN if _running(info["pid"]) else DEAD_WITH_PID_FILE


def _status_text(address: str, s) -> str:
    lat = s.compile_latency
    lines = [f"kiln daemon at {address} (kiln {s.version}, up {s.uptime_s:.0f} s)",
             f"  workers {s.workers} ({s.busy_workers} busy), queue {s.queue_depth}, restarts {s.worker_restarts}",
             f"  requests {s.requests}: hits {s.hits}, misses {s.misses}, merged {s.merged}, errors {s.errors}",
             f"  compile ms: p50 {lat.p50_ms:.1f}, p90 {lat.p90_ms:.1f}, p99 {lat.p99_ms:.1f}, max {lat.max_ms:.1f}",
             f"  cache {s.cache.path}: {s.cache.entries} entries, {_size(s.cache.volume_bytes)} of "
             f"{_size(s.cache.size_limit_bytes)}"]
    c = s.claims
    if c.led or c.stored or c.waited or c.taken_over:
        lines.append(f"  torch.compile graphs: compiled here {c.led + c.taken_over} (taken over {c.taken_over}), "
                     f"served {c.stored + c.waited} (after waiting {c.waited}), compiling now {c.held}")
    if c.autotune_led or c.autotune_stored or c.autotune_waited:
        lines.append(f"  autotuning: configs timed here for {c.autotune_led} kernels, choices served "
                     f"{c.autotune_stored + c.autotune_waited} (after waiting {c.autotune_waited})")
    if s.remote_cache.url:
        r = s.remote_cache
        lines.append(f"  shared tier {r.url} ({'up' if r.up else 'down, skipped'}): hits {r.hits}, misses {r.misses}, "
                     f"refused {r.refused}, errors {r.errors}, skipped {r.skipped}, writes {r.writes}; "
                     f"read ms: mean {r.read_mean_ms:.1f}, p50 ≤ {r.read_latency.p50_ms:g}, "
                     f"p90 ≤ {r.read_latency.p90_ms:g}")
    return "\n".join(lines)


def _prewarm(args) -> int:
    from . import prewarm

    progress = prewarm.ProgressBar() if sys.stderr.isatty() else None
    try:
        if args.source:
            sys.path.insert(0, os.getcwd())  # a dotted name is looked up from here, as `python -m` does
            report = prewarm.prewarm_module(args.source, args.target, address=args.address, progress=progress,
                                            tls_ca=args.tls_ca)
        else:
            if args.from_manifest:
                kernels = prewarm.from_manifest(args.from_manifest, args.target)
            else:
                with Cache() as cache:
                    kernels = prewarm.from_cache(cache, args.target)
            report = prewarm.through_daemon(kernels, args.address, progress=progress, tls_ca=args.tls_ca)
            if not args.from_manifest:
                report.artifacts = _share_artifacts()
    except (prewarm.NoDaemon, ValueError, ImportError, OSError, SyntaxError) as e:
        print(f"kiln prewarm: {e}", file=sys.stderr)
        return 2
    outcomes = {word: report.statuses.get(status, 0) for status, word in _PREWARM_OUTCOMES.items()}
    if args.json:
        print(json.dumps(_prewarm_doc(report, outcomes), indent=1))
        return 0 if report.ok else 1
    summary = ", ".join(f"{word} {n}" for word, n in outcomes.items() if n)
    print(f"prewarmed {_count(report.total, 'kernel')}: {summary or 'nothing to do'}")
    quiet = [label for label, reason in report.skipped if reason == prewarm.NO_SIGNATURES]
    if quiet:
        print(f"  no declared signatures: {', '.join(quiet)}", file=sys.stderr)
    for label, reason in report.skipped:
        if reason != prewarm.NO_SIGNATURES:
            print(f"  skipped {label}: {reason}", file=sys.stderr)
    for name, target, message in report.errors:
        print(f"  {name} for {target}: {message}", file=sys.stderr)
    if report.shared is not None:
        print(f"  in the shared tier {report.shared[0]}: {report.shared[1]} of {len(report.keys)}")
    if report.artifacts is not None:
        written, held = report.artifacts
        print(f"  torch.compile's graphs and autotuning: {written} written to the shared tier, {held} there already")
    return 0 if report.ok else 1


def _share_artifacts() -> tuple[int, int] | None:
    """--from-cache with a shared tier: the node cache's torch.compile artifacts the tier lacks go there."""
    from kiln.cache import remote

    from . import prewarm
    tier = remote.from_env()
    if tier is None:
        return None
    try:
        with Cache() as cache:
            return prewarm.share_artifacts(cache, tier)
    finally:
        tier.close()


# The daemon's answer for each kernel, as the prewarm summary words it.
_PREWARM_OUTCOMES = {"CACHE_MISS": "compiled", "CACHE_HIT": "cached", "CACHE_MERGED": "merged", "ERROR": "failed"}


def _prewarm_doc(report, outcomes: dict) -> dict:
    shared = None
    if report.shared is not None:
        held = report.shared[1]
        shared = {"tier": report.shared[0], "holds": held if isinstance(held, int) else None, "of": len(report.keys)}
    return {"kernels": report.total, **outcomes,
            "errors": [{"kernel": name, "target": target, "message": message}
                       for name, target, message in report.errors],
            "skipped": [{"kernel": label, "reason": reason} for label, reason in report.skipped],
            "shared": shared,
            "artifacts": None if report.artifacts is None else dict(zip(("written", "there"), report.artifacts))}


# --- cache --------------------------------------------------------------------------------

def _cache(args) -> Cache:
    return Cache(args.dir) if args.dir else Cache()


def _cache_stats(args) -> int:
    with _cache(args) as cache:
        s = cache.stats()
        s["hit_rate"] = _hit_rate(s["hits"], s["misses"])
        shared = _shared_tier_stats(cache)
        if shared is not None:
            s["shared"] = shared
        if args.zero:  # after reading them: the report shows what was zeroed
            cache.zero_counts()
            s["zeroed"] = True
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"node cache: {_reads(s['hits'], s['misses'])} (reads by every process on this node)")
    print(f"{s['path']}: {s['entries']} kernels, {s['blobs']} blobs, "
          f"{_size(s['volume_bytes'])} of {_size(s['size_limit_bytes'])}")
    if "shared" in s:
        print(_remote_report(s["shared"]))
    if args.zero:
        print("counters zeroed")
    return 0


def _shared_tier_stats(cache: Cache) -> dict | None:
    """What this node's processes saw of the shared tier, and the server as it answers now; None without one."""
    from kiln.cache import remote
    try:
        tier = remote.from_env()
    except ValueError as e:  # set, but unusable here (no cluster key, say): the tier is off
        return {"url": env.remote_cache_url(), "off": str(e)}
    if tier is None:
        return None
    counts = remote.summary(cache.counts(remote.COUNTS))
    return {**counts, "hit_rate": _hit_rate(counts["hits"], counts["misses"]), "server": tier.probe()}


def _hit_rate(hits: int, misses: int) -> float | None:
    """Hits over reads, as a fraction; None before the first read."""
    return hits / (hits + misses) if hits + misses else None


def _reads(hits: int, misses: int) -> str:
    """`hit rate 75.0% (3 hits, 1 miss)`, as ccache and sccache lead with it."""
    rate = _hit_rate(hits, misses)
    return (f"hit rate {'-' if rate is None else f'{100 * rate:.1f}%'} "
            f"({_count(hits, 'hit')}, {misses} {'miss' if misses == 1 else 'misses'})")


def _remote_report(shared: dict) -> str:
    """`kiln cache stats`' lines on the shared tier."""
    if "off" in shared:
        return f"shared tier {shared['url']}: off ({shared['off']})"
    server, lat = shared["server"], shared["latency_ms"]
    lines = [f"shared tier {server['url']}: {_reads(shared['hits'], shared['misses'])}, refused {shared['refused']}, "
             f"errors {shared['errors']}, skipped {shared['skipped']}, writes {shared['writes']} (this node, all processes)",
             f"  read ms: mean {lat['mean']:.1f}, p50 ≤ {lat['p50']:g}, p90 ≤ {lat['p90']:g}, p99 ≤ {lat['p99']:g}"]
    if not server["reachable"]:
        lines.append(f"  not reachable now: {server['error']}")
        return "\n".join(lines)
    lines.append(f"  server: {server['keys']} keys, {_size(server['used_memory_bytes'])} used of "
                 f"{_size(server['maxmemory_bytes']) if server['maxmemory_bytes'] else 'no limit'}, "
                 f"policy {server['maxmemory_policy']}, ping {server['ping_ms']:.2f} ms")
    if server["maxmemory_policy"] != "allkeys-lru" or not server["maxmemory_bytes"]:
        lines.append("  advice: give it maxmemory and maxmemory-policy allkeys-lru, so that old kernels make room")
    return "\n".join(lines)


def _cache_ls(args) -> int:
    with _cache(args) as cache:
        rows = [_described(row, cache.entry(row["key"])) for row in cache.ls()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'KEY':16}  {'CREATED':19}  {'KERNEL':32}  {'TARGET':8}  {'OPTIONS':18}  {'CUBIN':>10}  {'ALL':>10}")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["created"]))
        kernel = f"{row['name'] or '?'}({', '.join(row['signature'])})" if row["signature"] else row["name"] or "?"
        options = ",".join(f"{k.removeprefix('num_')}={v}" for k, v in sorted(row["options"].items())) or "-"
        print(f"{row['key'][:16]}  {when}  {kernel:32}  {row['target'] or '?':8}  {options:18}  "
              f"{_size(row['sizes'].get('cubin', 0)):>10}  {_size(sum(row['sizes'].values())):>10}")
    return 0


def _described(row: dict, entry: dict | None) -> dict:
    """An `ls` row with the kernel's argument types and compile options: the specializations of
    one kernel share its name, target and sizes, and differ in these (or only in their key)."""
    metadata = (entry or {}).get("metadata", {})
    args = metadata.get("args") if isinstance(metadata.get("args"), list) else []
    options = metadata.get("options") if isinstance(metadata.get("options"), dict) else {}
    signature = [_type_name(a.get("type", "?")) for a in args if isinstance(a, dict)]
    return {**row, "signature": signature, "options": options}


def _type_name(ir_type: str) -> str:
    """`ptr<fp16>` as Triton writes it in a signature, `*fp16`."""
    return f"*{ir_type[4:-1]}" if ir_type.startswith("ptr<") and ir_type.endswith(">") else ir_type


def _cache_prune(args) -> int:
    with _cache(args) as cache:
        report = cache.prune()
        limit = cache.size_limit
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"dropped {_count(report['dropped_entries'], 'kernel')} whose files were gone and "
          f"{_count(report['dropped_blobs'], 'file')} no kernel used; evicted {_count(report['evicted'], 'item')} "
          f"to stay within {_size(limit)}")
    return 0


def _cache_clear(args) -> int:
    with _cache(args) as cache:
        removed = cache.clear()
    print(json.dumps({"removed": removed}) if args.json else f"removed {removed} items")
    return 0


def _cache_export(args) -> int:
    with _cache(args) as cache:
        try:
            n = cache.export(args.file)
        except OSError as e:
            print(f"kiln cache export: cannot write {args.file}: {e.strerror or e}", file=sys.stderr)
            return 1
    print(json.dumps({"exported": n, "file": args.file}) if args.json
          else f"exported {_count(n, 'kernel')} to {args.file}")
    return 0


def _cache_import(args) -> int:
    from kiln.cache import ArchiveError
    with _cache(args) as cache:
        try:
            report = cache.import_(args.file)
        except ArchiveError as e:
            print(f"kiln cache import: {e}", file=sys.stderr)
            return 1
    code = 0 if not report.refused else 1
    if args.json:
        print(json.dumps({"imported": report.imported, "file": args.file,
                          "refused": [{"key": key, "reason": why} for key, why in report.refused]}, indent=1))
        return code
    print(f"imported {_count(report.imported, 'kernel')} from {args.file}")
    for key, why in report.refused[:20]:
        print(f"  refused {key[:16]}: {why}", file=sys.stderr)
    if len(report.refused) > 20:
        print(f"  refused {len(report.refused) - 20} more", file=sys.stderr)
    return code


def _size(n: float) -> str:
    """Bytes in binary units, as the size limit (8G: 8 GiB) is given."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
