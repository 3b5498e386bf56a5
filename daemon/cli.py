"""`kiln daemon start|stop|status`, `kiln prewarm`, `kiln cache stats|ls|prune|clear|export|import`,
`kiln run -- CMD` and `kiln doctor` (the drop-in mode).

    python -m kiln.daemon daemon start [--foreground] [--listen HOST:PORT] [--workers N]
    python -m kiln.daemon daemon status [--json]
    python -m kiln.daemon prewarm --from-manifest run.jsonl --target sm_90a --target sm_100a
    python -m kiln.daemon prewarm my_kernels.py --target sm_90a    (or a module's dotted name)
    python -m kiln.daemon cache export kernels.zip
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import sys
import threading
import time

from kiln.cache import Cache, env, paths

from . import launch


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = args.run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `kiln cache ls | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and the exit's flush goes nowhere
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln's compile daemon and node cache")
    groups = parser.add_subparsers(dest="group", required=True)

    daemon = groups.add_parser("daemon", help="the node-wide compile daemon").add_subparsers(dest="action", required=True)
    start = daemon.add_parser("start", help="start the daemon (in the background unless --foreground)")
    start.add_argument("--foreground", action="store_true", help="serve in this process (systemd, containers)")
    start.add_argument("--listen", metavar="HOST:PORT", help="serve on TCP (clients must present the token)")
    start.add_argument("--socket", metavar="PATH", help="the Unix socket (default: the node daemon's)")
    start.add_argument("--workers", type=int, default=None, help="compile worker processes (default: cores)")
    start.add_argument("--compile-fn", default=None, help="module:function the workers call")
    start.add_argument("--compile-timeout", type=float, default=300.0, help="seconds before a compile is killed")
    start.add_argument("--idle-exit", type=float, default=0, help="exit after this many idle seconds (0: never)")
    start.add_argument("--metrics", metavar="HOST:PORT", help="also serve Prometheus metrics at /metrics")
    start.add_argument("--tls-cert", metavar="PEM", help="with --listen: serve TLS with this certificate chain")
    start.add_argument("--tls-key", metavar="PEM", help="with --listen: the certificate's private key")
    start.set_defaults(run=_start)
    stop = daemon.add_parser("stop", help="stop the node daemon, letting compiles in flight finish")
    stop.add_argument("--socket", metavar="PATH", help="the daemon started with --socket PATH")
    stop.add_argument("--address", metavar="HOST:PORT", help="the daemon started with --listen HOST:PORT")
    stop.set_defaults(run=_stop)
    status = daemon.add_parser("status", help="workers, queue, hits and misses, compile latency")
    status.add_argument("--address", help="the daemon (default: KILN_DAEMON or the node daemon)")
    status.add_argument("--json", action="store_true")
    status.add_argument("--tls-ca", metavar="PEM", help="the CA of a TLS daemon (default: KILN_DAEMON_TLS_CA)")
    status.set_defaults(run=_status)

    prewarm = groups.add_parser("prewarm", help="compile kernels through the daemon before a run needs them")
    source = prewarm.add_mutually_exclusive_group(required=True)
    source.add_argument("source", nargs="?", metavar="MODULE_OR_FILE",
                        help="a module (dotted name) or .py file: its kernels' declared signatures x autotune configs")
    source.add_argument("--from-manifest", metavar="FILE", help="the JSON lines a run recorded")
    source.add_argument("--from-cache", action="store_true", help="every kernel the node cache keeps the IR of")
    prewarm.add_argument("--target", action="append", default=[],
                         help="compile for this target (repeatable; default: the local GPU's, or each kernel's own)")
    prewarm.add_argument("--address", help="the daemon (default: KILN_DAEMON or the node daemon)")
    prewarm.add_argument("--tls-ca", metavar="PEM", help="the CA of a TLS daemon (default: KILN_DAEMON_TLS_CA)")
    prewarm.set_defaults(run=_prewarm)

    run = groups.add_parser("run", help="run a command with `import triton` resolved to kiln (drop-in mode)")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    run.set_defaults(run=_run)
    doctor = groups.add_parser("doctor", help="say which implementation `import triton` gives, and why")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(run=_doctor)

    cache = groups.add_parser("cache", help="the node cache").add_subparsers(dest="action", required=True)
    for name, run, help_text in (("stats", _cache_stats, "size and counts"), ("ls", _cache_ls, "every entry"),
                                 ("prune", _cache_prune, "drop orphans, enforce the size limit"),
                                 ("clear", _cache_clear, "empty the cache"),
                                 ("export", _cache_export, "write entries and their IR to a zip archive"),
                                 ("import", _cache_import, "read an archive written by export")):
        sub = cache.add_parser(name, help=help_text)
        sub.add_argument("--dir", help="the cache directory (default: KILN_CACHE_DIR or ~/.cache/kiln)")
        if name in ("export", "import"):
            sub.add_argument("file")
        if name in ("stats", "ls", "prune"):
            sub.add_argument("--json", action="store_true")
        sub.set_defaults(run=run)
    return parser


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
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"kiln run: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


def _doctor(args) -> int:
    from kiln.dropin import doctor
    report = doctor.report()
    print(json.dumps(report, indent=2) if args.json else doctor.format_report(report))
    return 0


# --- daemon -------------------------------------------------------------------------------

def _start(args) -> int:
    if (args.tls_cert or args.tls_key) and not (args.tls_cert and args.tls_key and args.listen):
        print("kiln daemon start: --tls-cert and --tls-key go together, with --listen", file=sys.stderr)
        return 2
    if args.foreground:
        return serve(args)
    forwarded = _forwarded(args)
    if args.listen:
        launch.spawn_daemon(forwarded)
        print("kiln daemon starting; see", launch.log_file())
        return 0
    address = f"unix:{args.socket}" if args.socket else None
    print("kiln daemon serving at", launch.ensure_daemon(forwarded, idle_exit=args.idle_exit, address=address))
    return 0


def _forwarded(args) -> list[str]:
    """The options of `start` again, for the background process that serves."""
    out = ["--compile-timeout", str(args.compile_timeout)]
    for flag, value in (("--socket", args.socket), ("--listen", args.listen), ("--workers", args.workers),
                        ("--compile-fn", args.compile_fn), ("--metrics", args.metrics),
                        ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if value:
            out += [flag, str(value)]
    return out


def serve(args) -> int:
    from .server import DEFAULT_COMPILE_FN, create_server

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    log = logging.getLogger("kiln.daemon")
    token = tls = None
    if args.listen:
        address = args.listen
        token = env.daemon_token() or _new_token()
        if args.tls_cert:
            from .tls import server_credentials
            tls = server_credentials(args.tls_cert, args.tls_key)
        else:
            log.warning("event=plaintext_tcp address=%s note='the token and kernels cross the network in clear; "
                        "serve TLS with --tls-cert and --tls-key'", address)
    else:
        address = f"unix:{args.socket}" if args.socket else launch.default_address()
    server, port = create_server(address, args.compile_fn or DEFAULT_COMPILE_FN, workers=args.workers,
                                 compile_timeout=args.compile_timeout, token=token, tls=tls,
                                 remote_cache=env.remote_cache_url())
    server.start()
    if args.listen:
        address = f"{args.listen.rsplit(':', 1)[0]}:{port}"
    pid_file = launch.pid_file(address)
    paths.socket_dir(pid_file.parent)
    pid_file.write_text(json.dumps({"pid": os.getpid(), "address": address}))
    log.info("event=serving address=%s tls=%s workers=%d pid=%d remote_cache=%s", address, tls is not None,
             server.pool.size, os.getpid(), server.service.remote.where if server.service.remote else "none")
    if args.metrics:
        from .metrics import serve_metrics
        host, _, port = args.metrics.rpartition(":")
        metrics = serve_metrics(server.service, host or "127.0.0.1", int(port))
        log.info("event=metrics address=%s:%d", *metrics.server_address[:2])

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        if args.idle_exit and server.service.idle_for() > args.idle_exit:
            log.info("event=idle_exit idle_s=%.0f", server.service.idle_for())
            break
    log.info("event=stopping")
    server.stop(grace=30)
    if (launch.read_pid_file(address) or {}).get("pid") == os.getpid():
        pid_file.unlink(missing_ok=True)
    log.info("event=stopped")
    return 0


def _new_token() -> str:
    """A fresh token, left for clients in a 0600 file beside the socket."""
    token = secrets.token_urlsafe(32)
    paths.private_dir(env.runtime_dir())
    path = launch.token_file()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    logging.getLogger("kiln.daemon").info("event=token_written path=%s", path)
    return token


def _stop(args) -> int:
    address = f"unix:{args.socket}" if args.socket else args.address
    info = launch.read_pid_file(address)
    if info is None:
        print("no kiln daemon is running" + ("" if address else _others()))
        return 1
    try:
        os.kill(info["pid"], signal.SIGTERM)
    except ProcessLookupError:
        launch.pid_file(address).unlink(missing_ok=True)
        print("no kiln daemon is running (removed a stale pid file)")
        return 1
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
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # the state follows the command name
    except (OSError, IndexError):
        return True  # no /proc (not Linux): signal 0 is all there is


def _others() -> str:
    """The daemons other than the node daemon that this user runs here, and how to name them."""
    others = launch.other_daemons()
    return "".join(f"\n  one listens at {a} (pid {pid}): kiln daemon stop --address {a}" for a, pid in others)


def _status(args) -> int:
    import grpc
    from google.protobuf.json_format import MessageToDict

    from .client import Client

    address = args.address or launch.configured_address()
    if address is None:
        print("KILN_DAEMON=off")
        return 1
    token = env.daemon_token() or launch.own_token(address)
    with Client(address, token=token, tls_ca=args.tls_ca or env.daemon_tls_ca()) as client:
        try:
            s = client.stats()
        except grpc.RpcError as e:
            hint = ""
            if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                hint = (f"; it wants its token in KILN_DAEMON_TOKEN (a daemon of yours started with --listen "
                        f"leaves it in {launch.token_file()})")
            elif address == launch.default_address():
                hint = _others()
            print(f"no kiln daemon answers at {address}: {e.code().name}{hint}", file=sys.stderr)
            return 1
        except paths.UnsafePathError as e:
            print(e, file=sys.stderr)
            return 1
    if args.json:
        doc = MessageToDict(s, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
        for part in (doc, doc["cache"], doc["remote_cache"], doc["claims"]):  # protobuf's JSON spells 64-bit integers as strings
            part.update({k: int(v) for k, v in part.items() if isinstance(v, str) and v.isdigit()})
        print(json.dumps({"address": address, **doc}, indent=1))
        return 0
    lat = s.compile_latency
    print(f"kiln daemon at {address} (kiln {s.version}, up {s.uptime_s:.0f} s)\n"
          f"  workers {s.workers} ({s.busy_workers} busy), queue {s.queue_depth}, restarts {s.worker_restarts}\n"
          f"  requests {s.requests}: hits {s.hits}, misses {s.misses}, merged {s.merged}, errors {s.errors}\n"
          f"  compile ms: p50 {lat.p50_ms:.1f}, p90 {lat.p90_ms:.1f}, p99 {lat.p99_ms:.1f}, max {lat.max_ms:.1f}\n"
          f"  cache {s.cache.path}: {s.cache.entries} entries, {_size(s.cache.volume_bytes)} of "
          f"{_size(s.cache.size_limit_bytes)}")
    c = s.claims
    if c.led or c.stored or c.waited or c.taken_over:
        print(f"  torch.compile graphs: compiled here {c.led + c.taken_over} (taken over {c.taken_over}), "
              f"served {c.stored + c.waited} (after waiting {c.waited}), compiling now {c.held}")
    if s.remote_cache.url:
        r = s.remote_cache
        print(f"  shared tier {r.url} ({'up' if r.up else 'down, skipped'}): hits {r.hits}, misses {r.misses}, "
              f"refused {r.refused}, errors {r.errors}, skipped {r.skipped}, writes {r.writes}; "
              f"read ms: mean {r.read_mean_ms:.1f}, p50 ≤ {r.read_latency.p50_ms:g}, p90 ≤ {r.read_latency.p90_ms:g}")
    return 0


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
    except (prewarm.NoDaemon, ValueError, ImportError, OSError, SyntaxError) as e:
        print(f"kiln prewarm: {e}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{k.removeprefix('CACHE_').lower()} {v}" for k, v in sorted(report.statuses.items()))
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
    return 0 if report.ok else 1


# --- cache --------------------------------------------------------------------------------

def _cache(args) -> Cache:
    return Cache(args.dir) if args.dir else Cache()


def _cache_stats(args) -> int:
    from kiln.cache import remote
    with _cache(args) as cache:
        s = cache.stats()
        tier = remote.from_env()
        if tier is not None:  # what this node's processes saw of it, and the server as it answers now
            s["shared"] = {**remote.summary(cache.counts(remote.COUNTS)), "server": tier.probe()}
    if args.json:
        print(json.dumps(s, indent=1))
        return 0
    print(f"{s['path']}: {s['entries']} kernels, {s['blobs']} blobs, "
          f"{_size(s['volume_bytes'])} of {_size(s['size_limit_bytes'])}")
    if "shared" in s:
        print(_remote_report(s["shared"]))
    return 0


def _remote_report(shared: dict) -> str:
    """`kiln cache stats`' lines on the shared tier."""
    server, lat = shared["server"], shared["latency_ms"]
    lines = [f"shared tier {server['url']}: hits {shared['hits']}, misses {shared['misses']}, refused {shared['refused']}, "
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
        rows = cache.ls()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'KEY':16}  {'CREATED':19}  {'KERNEL':24}  {'TARGET':8}  {'CUBIN':>10}  {'ALL':>10}")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["created"]))
        print(f"{row['key'][:16]}  {when}  {row['name'] or '?':24}  {row['target'] or '?':8}  "
              f"{_size(row['sizes'].get('cubin', 0)):>10}  {_size(sum(row['sizes'].values())):>10}")
    return 0


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
        print(f"removed {cache.clear()} items")
    return 0


def _cache_export(args) -> int:
    with _cache(args) as cache:
        try:
            n = cache.export(args.file)
        except OSError as e:
            print(f"kiln cache export: cannot write {args.file}: {e.strerror or e}", file=sys.stderr)
            return 1
    print(f"exported {_count(n, 'kernel')} to {args.file}")
    return 0


def _cache_import(args) -> int:
    from kiln.cache import ArchiveError
    with _cache(args) as cache:
        try:
            report = cache.import_(args.file)
        except ArchiveError as e:
            print(f"kiln cache import: {e}", file=sys.stderr)
            return 1
    print(f"imported {_count(report.imported, 'kernel')} from {args.file}")
    for key, why in report.refused[:20]:
        print(f"  refused {key[:16]}: {why}", file=sys.stderr)
    if len(report.refused) > 20:
        print(f"  refused {len(report.refused) - 20} more", file=sys.stderr)
    return 0 if not report.refused else 1


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
