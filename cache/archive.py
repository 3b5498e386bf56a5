"""A portable archive of cache entries, to carry compiled kernels (and the IR they were
compiled from, stored as the artifact `ir`) to another node.

A zip file holding `index.json` ({format, version, entries: [{key, artifacts: {name:
digest}, metadata, created}]}) and each blob once as `blobs/<sha256>`. JSON and raw
bytes only: no pickles, so any kiln version can read it safely.

An archive is data from elsewhere: an import takes no key on trust. It recomputes each
entry's compile key from the IR the entry carries, with the target and options its
metadata names and this kiln's compiler identity, and stores the entry only if that key is
the one the archive names (an entry of another kiln build, or an altered one, is refused).
Members are read up to `MAX_MEMBER_BYTES`; anything malformed is a one-line `ArchiveError`.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field

from .metadata import MetadataError, checked, expected
from .store import Cache, digest

FORMAT = "kiln-cache-archive"
VERSION = 1
MAX_MEMBER_BYTES = 256 << 20  # a cubin is a few MB; this bounds what one member can make us hold
MAX_ENTRIES = 1 << 20


class ArchiveError(ValueError):
    pass


@dataclass
class ImportReport:
    imported: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (key as the archive gives it, why)


def export_archive(cache: Cache, file, keys=None) -> int:
    """Write the entries of `cache` named by `keys` (default all) to `file`; returns how many."""
    entries, written = [], set()
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in (cache.keys() if keys is None else keys):
            entry = cache.entry(key)
            if entry is None:
                continue
            blobs = {d: cache.get_blob(d) for d in entry["artifacts"].values()}
            if any(data is None for data in blobs.values()):
                continue  # a blob was evicted or corrupt: leave the entry out
            for d, data in blobs.items():
                if d not in written:
                    zf.writestr(f"blobs/{d}", data)
                    written.add(d)
            entries.append({"key": key, "artifacts": entry["artifacts"], "metadata": entry["metadata"],
                            "created": entry["created"]})
        index = {"format": FORMAT, "version": VERSION, "entries": entries}
        zf.writestr("index.json", json.dumps(index, sort_keys=True, indent=1))
    return len(entries)


def import_archive(cache: Cache, file) -> ImportReport:
    """Store every intact entry of the archive `file` whose key its IR reproduces."""
    try:
        zf = zipfile.ZipFile(file)
    except OSError as e:
        raise ArchiveError(f"cannot read {file}: {e.strerror or e}") from None
    except (zipfile.BadZipFile, ValueError, EOFError) as e:
        raise ArchiveError(f"{file} is not a kiln cache archive ({_line(e)})") from None
    report = ImportReport()
    with zf:
        entries = _entries(zf, file)
        for entry in entries:
            label = str(entry.get("key"))[:64] if type(entry) is dict else "?"
            try:
                key, artifacts, metadata, created = _verified(zf, entry)
            except _Refused as e:
                report.refused.append((label, str(e)))
                continue
            cache.put_result(key, artifacts, metadata, created=created)
            report.imported += 1
    return report


class _Refused(Exception):
    pass


def _entries(zf: zipfile.ZipFile, file) -> list:
    try:
        index = json.loads(_read(zf, "index.json"))
    except (_Refused, ValueError) as e:
        raise ArchiveError(f"{file} has no readable index.json ({_line(e)})") from None
    if type(index) is not dict or index.get("format") != FORMAT or index.get("version") != VERSION:
        what = (index.get("format"), index.get("version")) if type(index) is dict else type(index).__name__
        raise ArchiveError(f"{file} is not a kiln cache archive of version {VERSION} (format, version: {what!r:.80})")
    entries = index.get("entries")
    if type(entries) is not list or len(entries) > MAX_ENTRIES:
        raise ArchiveError(f"{file}: index.json's entries are not a list of at most {MAX_ENTRIES}")
    return entries


def _verified(zf: zipfile.ZipFile, entry) -> tuple[str, dict, dict, float]:
    """(key, artifacts, metadata, created) of `entry`, once its blobs and key check out."""
    if type(entry) is not dict:
        raise _Refused("not an object")
    key, names, metadata, created = (entry.get(f) for f in ("key", "artifacts", "metadata", "created"))
    if type(key) is not str or type(names) is not dict or type(metadata) is not dict or type(created) not in (int, float):
        raise _Refused("lacks its key, artifacts, metadata or created time")
    artifacts = {}
    for name, d in names.items():
        if type(name) is not str or type(d) is not str:
            raise _Refused("an artifact is not named by a digest")
        data = _read(zf, f"blobs/{d}")
        if digest(data) != d:
            raise _Refused(f"blob {name} does not match its digest")
        artifacts[name] = data
    if "ir" not in artifacts:
        raise _Refused("carries no IR to recompute its key from")
    target, options = metadata.get("target"), metadata.get("options")
    if type(target) is not str or type(options) is not dict:
        raise _Refused("its metadata names no target and options")
    try:
        from kiln.ir import parse_function
        from kiln.proto import compile_key
        fn = parse_function(artifacts["ir"].decode())
        recomputed = compile_key(fn, target, options)
    except Exception as e:  # noqa: BLE001 - IR that does not parse is a refusal, whatever the parser raised
        raise _Refused(f"its IR does not parse ({_line(e)})") from None
    if recomputed != key:
        raise _Refused("its IR, target and options give another key (another kiln build, or altered)")
    try:
        checked(metadata, **expected(fn.name, target, options))
    except MetadataError as e:
        raise _Refused(_line(e)) from None
    return key, artifacts, metadata, float(created)


def _read(zf: zipfile.ZipFile, name: str) -> bytes:
    """Member `name`, read no further than MAX_MEMBER_BYTES whatever its header claims."""
    try:
        info = zf.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            raise _Refused(f"{name} is {info.file_size} bytes, over the limit of {MAX_MEMBER_BYTES}")
        with zf.open(info) as member:
            data = member.read(MAX_MEMBER_BYTES + 1)
    except KeyError:
        raise _Refused(f"{name} is missing") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as e:
        raise _Refused(f"{name} cannot be read ({_line(e)})") from None
    if len(data) > MAX_MEMBER_BYTES:
        raise _Refused(f"{name} is over the limit of {MAX_MEMBER_BYTES} bytes")
    return data


def _line(e: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:200]
