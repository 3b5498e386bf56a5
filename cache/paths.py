"""The directories and sockets kiln uses, made and checked as ssh-agent and sccache do.

Whoever can write a directory kiln uses can plant a socket that serves us binaries, or an
entry that names them. So each directory is made 0700 (a shared node cache: 2770, group
members trusted alike) and, made now or found, must be a directory that this user owns
and that no one else can write; a daemon socket must be this user's. Anything else is an
`UnsafePathError` that says what is wrong and what to do.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
SHARED_DIR_MODE = 0o2770  # setgid: what members of the group make stays the group's
SHARED_FILE_MODE = 0o660


class UnsafePathError(PermissionError):
    pass


def private_dir(path: str | os.PathLike) -> Path:
    """`path`, made 0700 (with its missing parents) if absent, once checked to be ours alone."""
    path = Path(path)
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    check_dir(path)
    if stat.S_IMODE(os.stat(path).st_mode) != PRIVATE_DIR_MODE:  # made by an older kiln, or under a umask
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def shared_dir(path: str | os.PathLike) -> Path:
    """`path`, made group-shared (2770) if absent; it may be another group member's, but no
    one outside the group may write it."""
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        try:
            path.mkdir()
            os.chmod(path, SHARED_DIR_MODE)  # mkdir's mode passes through the umask
        except FileExistsError:
            pass
    check_dir(path, shared=True)
    return path


def check_dir(path: Path, shared: bool = False) -> None:
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"kiln: {path} is not a directory")
    mode = stat.S_IMODE(st.st_mode)
    if shared:
        ok = not mode & 0o002 and (st.st_uid == os.geteuid() or st.st_gid in _groups())
        what = "this user or one of its groups, and not writable by everyone"
    else:
        ok = st.st_uid == os.geteuid() and not mode & 0o022
        what = f"this user (uid {os.geteuid()}) and writable by no one else"
    if not ok:
        raise UnsafePathError(
            f"kiln: refusing {path}: it is owned by uid {st.st_uid}, group {st.st_gid}, mode {mode:o}, but must be "
            f"owned by {what}, or another user could serve or plant kernels there; remove it, fix it "
            f"(chmod go-w), or point KILN_CACHE_DIR / KILN_RUNTIME_DIR elsewhere")


def check_socket(path: str | os.PathLike) -> None:
    """Refuse a daemon socket, or the directory it sits in, that another user could have
    put there: connecting would run whatever their server sends."""
    path = Path(path)
    check_socket_dir(path.parent)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # nobody serves there yet: a daemon of ours may be started
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise UnsafePathError(
            f"kiln: refusing the daemon socket {path}: it is {'a socket' if stat.S_ISSOCK(st.st_mode) else 'no socket'} "
            f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); remove it if it is stale")


def check_socket_dir(path: Path) -> None:
    """A socket's directory is ours alone, or sticky like /tmp (no one can replace our
    socket there; one they put first fails `check_socket`'s owner test)."""
    st = os.stat(path)
    if not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid in (0, os.geteuid())):
        check_dir(path)


def socket_dir(path: str | os.PathLike) -> Path:
    """The directory for a socket (and its pid file): made 0700 if absent, else checked."""
    path = Path(path)
    if not path.exists():
        return private_dir(path)
    check_socket_dir(path)
    return path


def private_file(path: str | os.PathLike, dirs=()) -> None:
    """Make a file of a private cache, and `dirs` (those made for it), this user's alone (a file is
    born with the umask's mode)."""
    for p, mode in ((path, PRIVATE_FILE_MODE), *((d, PRIVATE_DIR_MODE) for d in dirs)):
        try:
            os.chmod(p, mode)
        except OSError:
            pass  # gone meanwhile


def share_file(path: str | os.PathLike, dirs=()) -> None:
    """Make a file of a shared cache, and `dirs` (those made for it), the group's."""
    for p, mode in ((path, SHARED_FILE_MODE), *((d, SHARED_DIR_MODE) for d in dirs)):
        try:
            if os.stat(p).st_uid == os.geteuid():
                os.chmod(p, mode)
        except OSError:
            pass  # another member's, or gone: theirs to share


def _groups() -> set[int]:
    return {os.getegid(), *os.getgroups()}
