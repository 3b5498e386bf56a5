"""A portable archive of cache entries, to carry compiled kernels (and the IR they were
compiled from, stored as the artifact `ir`) to another node.

A zip file holding `index.json` ({format, version, entries: [{key, artifacts: {name:
digest}, metadata, created}]}) and each blob once as `blobs/<sha256>`. JSON and raw
bytes only: no pickles, so any kiln version can read it safely.
"""
from __future__ import annotations

import json
import zipfile

from .store import Cache, digest

FORMAT = "kiln-cache-archive"
VERSION = 1


class ArchiveError(ValueError):
    pass


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


def import_archive(cache: Cache, file) -> int:
    """Store every intact entry of the archive `file` in `cache`; returns how many."""
    try:
        zf = zipfile.ZipFile(file)
    except zipfile.BadZipFile as e:
        raise ArchiveError(f"not a kiln cache archive: {e}") from None
    with zf:
        try:
            index = json.loads(zf.read("index.json"))
        except (KeyError, ValueError) as e:
            raise ArchiveError(f"archive has no readable index.json: {e}") from None
        if index.get("format") != FORMAT or index.get("version") != VERSION:
            raise ArchiveError(f"unsupported archive {index.get('format')!r} version {index.get('version')!r}")
        count = 0
        for entry in index.get("entries", []):
            try:
                artifacts = _intact_artifacts(zf, entry["artifacts"])
                if artifacts is not None:
                    cache.put_result(entry["key"], artifacts, entry["metadata"], created=entry["created"])
                    count += 1
            except (KeyError, TypeError, AttributeError, ValueError) as e:
                raise ArchiveError(f"malformed archive entry {entry!r:.200}: {e}") from None
        return count


def _intact_artifacts(zf: zipfile.ZipFile, names: dict) -> dict | None:
    """The entry's blobs by artifact name, or None if any is missing or corrupt."""
    artifacts = {}
    for name, d in names.items():
        try:
            data = zf.read(f"blobs/{d}")
        except KeyError:
            return None
        if digest(data) != d:
            return None
        artifacts[name] = data
    return artifacts
