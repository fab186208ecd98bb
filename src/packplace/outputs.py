"""Safe output files for every command: one rule for ``--out``, ``--gantt``, ``--plot`` and report folders.

* ``-`` is standard output.
* A path that is, or leads through symbolic links to, a character device or a FIFO (``/dev/null``, a
  named pipe) is written through: opened in place and written, never created, renamed or replaced.
  ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and ``/proc/self/fd/N`` are written to this process's
  open descriptor N. A block device, a socket, a directory or another process's descriptor is refused.
* Any other path is written atomically: a temporary file in the target folder is moved over the target
  (``os.replace``), so readers see the old file or the new one; a write error (full disk) leaves the old
  file intact. An existing file keeps its owner and mode; a symbolic link to a regular file is replaced
  by the new file (the link's destination is never written).
* No file the command read is overwritten: the ``inputs`` given, and every file recorded by
  :func:`record_input` inside :func:`reading_scope` (the CLI opens one per command; config readers
  record what they read). The refusal is one line naming both.

:func:`check_output_path` applies the rule before any work; the writers apply it again at write time.
Every error is one :class:`~packplace.errors.ConfigError` line naming the option and the path.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from packplace.errors import ConfigError

#: The output path that means standard output.
STDOUT = "-"
#: Most symbolic links followed when resolving an output path (the kernel's own limit).
MAX_LINKS = 40

_FD_LINK = re.compile(r"^/proc/(self|thread-self|\d+)(?:/task/\d+)?/fd/(\d+)$|^/dev/fd/(\d+)$")
_read_scopes: list[dict[str, str]] = []


@contextlib.contextmanager
def reading_scope() -> Iterator[None]:
    """Within the block, :func:`record_input` remembers the files read, and no output may overwrite one.
    Outside any scope nothing is recorded (library use keeps no state)."""
    _read_scopes.append({})
    try:
        yield
    finally:
        _read_scopes.pop()


def record_input(path: str | os.PathLike[str]) -> None:
    """Note that ``path`` was read as an input (a config, a model file, a suite, a baseline)."""
    if _read_scopes:
        text = os.fspath(path)
        _read_scopes[-1].setdefault(os.path.realpath(text), text)


def recorded_inputs() -> list[str]:
    """The files recorded in the innermost :func:`reading_scope` (as they were named), oldest first."""
    return list(_read_scopes[-1].values()) if _read_scopes else []


@dataclass(frozen=True)
class Target:
    """Where an output path leads: ``kind`` is ``stdout``, ``fd`` (an open descriptor ``fd``),
    ``device`` or ``fifo`` (written through at ``resolved``), or ``file`` (replaced atomically at the
    named path; ``existing`` when a regular file, not a link, is there)."""

    kind: str
    resolved: str = ""
    fd: int = -1
    existing: bool = False


def resolve_target(path: str, option: str) -> Target:
    """Classify ``path`` by the output rule (module docstring) without writing anything.

    Raises:
        ConfigError: an empty path, a directory, a block device, a socket, another process's
            descriptor, a descriptor this process has not open, or a loop of symbolic links.
    """
    if not path:
        raise ConfigError(f"{option}: empty path")
    if path == STDOUT:
        return Target("stdout")
    current = os.path.abspath(path)
    for _ in range(MAX_LINKS):
        match = _FD_LINK.match(current) or _FD_LINK.match(_canonical_folder(current))
        if match:
            owner, number = match.group(1), match.group(2) or match.group(3)
            if owner not in (None, "self", "thread-self") and int(owner) != os.getpid():
                raise ConfigError(f"{option}: {path!r} is a descriptor of another process; refusing to write it")
            fd = int(number)
            try:
                os.fstat(fd)
            except OSError:
                raise ConfigError(f"{option}: {path!r} names descriptor {fd}, which is not open") from None
            return Target("fd", current, fd)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return Target("file", current)
        except OSError as exc:
            raise ConfigError(f"{option}: cannot use {path!r}: {exc.strerror or exc}") from None
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            current = _canonical_folder(os.path.join(os.path.dirname(current), os.readlink(current)))
            continue
        if stat.S_ISREG(mode):
            return Target("file", current, existing=not os.path.islink(path))
        if stat.S_ISDIR(mode):
            raise ConfigError(f"{option}: {path!r} is a directory, expected a file path")
        if stat.S_ISCHR(mode):
            return Target("device", current)
        if stat.S_ISFIFO(mode):
            return Target("fifo", current)
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise ConfigError(f"{option}: {path!r} is {kind}; refusing to write it")
    raise ConfigError(f"{option}: {path!r}: too many levels of symbolic links")


def _canonical_folder(path: str) -> str:
    """``path`` with its folder's symbolic links resolved (its last part kept as is)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _check_not_input(path: str, option: str, inputs: Iterable[str]) -> None:
    if path == STDOUT:
        return
    for source in [*inputs, *recorded_inputs()]:
        if not source or source == STDOUT:
            continue
        if os.path.abspath(path) == os.path.abspath(source) or (
                os.path.exists(path) and os.path.exists(source) and _same_file(path, source)):
            raise ConfigError(f"{option}: {path!r} is the input file {source!r}; refusing to overwrite it")


def check_output_path(path: str, option: str, inputs: Iterable[str] = ()) -> None:
    """Fail fast, before any solving, when ``path`` cannot be written by the output rule.

    Args:
        path: The output file (``-``: standard output).
        option: The command-line option, for messages (``--out``).
        inputs: Files the command reads (the config); writing over one of them is refused (so is writing
            over a file recorded by :func:`record_input`).

    Raises:
        ConfigError: ``<option>: ...`` with the path: empty, a directory, a block device or socket, an
            input file (also through a symbolic link), a missing or unwritable folder.
    """
    target = resolve_target(path, option)
    _check_not_input(path, option, inputs)
    if target.kind != "file":
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{option}: directory {parent!r} does not exist")
    _probe_writable(parent, option)


def _probe_writable(folder: str, option: str) -> None:
    """Create and remove a probe file in ``folder``; ``ConfigError`` naming ``option`` and the folder if
    that fails."""
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".packplace-probe-")
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write in {folder!r}: {exc.strerror or exc}") from None
    os.close(handle)
    with contextlib.suppress(OSError):
        os.unlink(probe)


#: The files a report folder holds.
REPORT_FILES = ("report.json", "report.csv", "report.md")


def check_output_dir(path: str, option: str, inputs: Iterable[str] = ()) -> None:
    """Fail fast when ``path`` cannot be the output folder: create it (with parents) if missing, and
    check that files can be created in it; none of the report's files (:data:`REPORT_FILES`) may be a
    file the command reads (``inputs`` and the recorded ones) or a non-regular file.

    Raises:
        ConfigError: ``<option>: ...`` with the path: ``-``, an existing non-folder, a folder that
            cannot be created or written, or a report file that is an input or not a regular file.
    """
    if not path:
        raise ConfigError(f"{option}: empty path")
    if path == STDOUT:
        raise ConfigError(f"{option}: a report folder cannot be standard output ('-')")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ConfigError(f"{option}: {path!r} exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write in {path!r}: {exc.strerror or exc}") from None
    _probe_writable(path, option)
    inputs = list(inputs)
    for name in REPORT_FILES:
        report_path = os.path.join(path, name)
        for source in [*inputs, *recorded_inputs()]:
            if source and os.path.abspath(source) == os.path.abspath(report_path):
                raise ConfigError(f"{option}: {path!r} holds the input {source!r}, which the report would overwrite")
        _check_not_input(report_path, option, inputs)
        resolve_target(report_path, option)


def _chown_like(temporary: str, info: os.stat_result) -> bool:
    """Give ``temporary`` the owner, group and mode of ``info``; False when the owner cannot be kept."""
    os.chmod(temporary, stat.S_IMODE(info.st_mode))
    if (info.st_uid, info.st_gid) == (os.geteuid(), os.getegid()):
        return True
    try:
        os.chown(temporary, info.st_uid, info.st_gid)
    except PermissionError:
        try:  # the group may still be ours to set
            os.chown(temporary, -1, info.st_gid)
        except PermissionError:
            pass
        return os.stat(temporary).st_uid == info.st_uid
    return True


@contextlib.contextmanager
def atomic_path(path: str, option: str) -> Iterator[str]:
    """A temporary path in ``path``'s folder (same extension) to write to; on success it replaces
    ``path`` (``os.replace``) with the old file's owner and mode (when one is there), on any error it is
    removed and ``path`` is untouched. Only for targets of kind ``file`` (:func:`resolve_target`).

    Raises:
        ConfigError: the write or the replace failed (``<option>: cannot write '<path>': <reason>``).
    """
    parent = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    _, extension = os.path.splitext(base)
    try:
        handle, temporary = tempfile.mkstemp(dir=parent, prefix=f".{base}.", suffix=f".tmp{extension}")
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write {path!r}: {exc.strerror or exc}") from None
    os.close(handle)
    try:
        yield temporary
        try:
            old = os.lstat(path)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISREG(old.st_mode):
            if not _chown_like(temporary, old):
                raise ConfigError(f"{option}: cannot keep the owner of {path!r} (uid {old.st_uid}); "
                                  "refusing to replace it")
        else:
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(temporary, 0o666 & ~mask)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ConfigError(f"{option}: cannot write {path!r}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_through(target: Target, path: str, option: str, data: bytes) -> None:
    """Write ``data`` to a target that is not replaced: standard output, an open descriptor, a
    character device or a FIFO (which must have a reader)."""
    try:
        if target.kind == "stdout":
            sys.stdout.flush()
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:
                buffer.write(data)
                buffer.flush()
            else:
                sys.stdout.write(data.decode("utf-8", errors="replace"))
                sys.stdout.flush()
            return
        if target.kind == "fd":
            if target.fd in (1, 2):
                (sys.stdout if target.fd == 1 else sys.stderr).flush()
            _write_all(target.fd, data)
            return
        flags = os.O_WRONLY | getattr(os, "O_NOCTTY", 0)
        if target.kind == "fifo":
            flags |= os.O_NONBLOCK  # no reader: ENXIO at once instead of blocking forever
        fd = os.open(target.resolved, flags)
        try:
            if target.kind == "fifo":
                os.set_blocking(fd, True)
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise ConfigError(f"{option}: {path!r} is a FIFO with no reader") from None
        raise ConfigError(f"{option}: cannot write {path!r}: {exc.strerror or exc}") from None


def write_bytes(path: str, data: bytes, option: str, inputs: Iterable[str] = ()) -> None:
    """Write ``data`` to ``path`` by the output rule (module docstring).

    Raises:
        ConfigError: ``<option>: ...`` naming the path: refused by the rule, or the write failed (the old
            file is intact).
    """
    target = resolve_target(path, option)
    _check_not_input(path, option, inputs)
    if target.kind != "file":
        _write_through(target, path, option, data)
        return
    with atomic_path(path, option) as temporary:
        _write_bytes(temporary, data)


def write_atomic(path: str, text: str, option: str, inputs: Iterable[str] = ()) -> None:
    """Write ``text`` (UTF-8) to ``path`` by the output rule: atomically for a file, written through for
    standard output, a device or a FIFO (module docstring).

    Raises:
        ConfigError: ``<option>: cannot write '<path>': <reason>`` (e.g. no space left on device; the old
            file is intact), or a refusal of the rule.
    """
    write_bytes(path, text.encode("utf-8"), option, inputs)


def write_with(path: str, option: str, writer: Callable[[Any], None]) -> None:
    """Let ``writer(destination)`` produce the file (e.g. matplotlib's ``savefig``), then put it in place
    by the output rule; ``destination`` is a temporary path for a file target and a binary buffer
    (``io.BytesIO``) for a written-through one. An exception of ``writer`` leaves ``path`` untouched."""
    target = resolve_target(path, option)
    _check_not_input(path, option, ())
    if target.kind != "file":
        buffer = io.BytesIO()
        writer(buffer)
        _write_through(target, path, option, buffer.getvalue())
        return
    with atomic_path(path, option) as temporary:
        writer(temporary)
