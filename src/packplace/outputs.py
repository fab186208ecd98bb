"""Safe output files for every command: checked before any work, written atomically.

:func:`check_output_path` runs before the config is loaded or anything is solved: it refuses a path
that is a directory, that names an input file (the config: ``--out`` never overwrites what was read),
whose folder is missing, or where a file cannot be created (it creates and removes a probe file in the
target folder, which also catches read-only mounts and ``/proc``-like paths).

:func:`write_atomic` writes to a temporary file in the target folder and moves it over the target with
``os.replace``: readers see the old file or the new one, never a truncated one; a full disk or any write
error leaves the old file intact and the temporary file removed. A symbolic link at the target is
replaced by the new file (the link's destination is never written through). Every error is one
:class:`~packplace.errors.ConfigError` line naming the option and the path.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator

from packplace.errors import ConfigError


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: str, option: str, inputs: Iterable[str] = ()) -> None:
    """Fail fast, before any solving, when ``path`` cannot be written safely.

    Args:
        path: The output file.
        option: The command-line option, for messages (``--out``).
        inputs: Files the command reads (the config); writing over one of them is refused.

    Raises:
        ConfigError: ``<option>: ...`` with the path: empty, a directory, an input file (also through a
            symbolic link), a missing or unwritable folder.
    """
    if not path:
        raise ConfigError(f"{option}: empty path")
    if os.path.isdir(path):
        raise ConfigError(f"{option}: {path!r} is a directory, expected a file path")
    for source in inputs:
        if source and os.path.exists(path) and os.path.exists(source) and _same_file(path, source):
            raise ConfigError(f"{option}: {path!r} is the input file {source!r}; refusing to overwrite it")
        if source and os.path.abspath(path) == os.path.abspath(source):
            raise ConfigError(f"{option}: {path!r} is the input file; refusing to overwrite it")
    if os.path.lexists(path) and not os.path.islink(path) and not os.path.isfile(path):
        raise ConfigError(f"{option}: {path!r} exists and is not a regular file")
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


def check_output_dir(path: str, option: str, inputs: Iterable[str] = ()) -> None:
    """Fail fast when ``path`` cannot be the output folder: create it (with parents) if missing, and
    check that files can be created in it; files the command reads (``inputs``) must not lie in it under
    the report's names.

    Raises:
        ConfigError: ``<option>: ...`` with the path: an existing non-folder, or a folder that cannot be
            created or written.
    """
    if not path:
        raise ConfigError(f"{option}: empty path")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ConfigError(f"{option}: {path!r} exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write in {path!r}: {exc.strerror or exc}") from None
    _probe_writable(path, option)
    for source in inputs:
        if source and os.path.dirname(os.path.abspath(source)) == os.path.abspath(path) and \
                os.path.basename(source) in ("report.json", "report.csv", "report.md"):
            raise ConfigError(f"{option}: {path!r} holds the input {source!r}, which the report would overwrite")


@contextlib.contextmanager
def atomic_path(path: str, option: str) -> Iterator[str]:
    """A temporary path in ``path``'s folder (same extension) to write to; on success it replaces
    ``path`` (``os.replace``), on any error it is removed and ``path`` is untouched.

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


def write_atomic(path: str, text: str, option: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (module docstring).

    Raises:
        ConfigError: ``<option>: cannot write '<path>': <reason>`` (e.g. no space left on device); the old
            file is intact.
    """
    with atomic_path(path, option) as temporary:
        _write_bytes(temporary, text.encode("utf-8"))


def write_with(path: str, option: str, writer: Callable[[str], None]) -> None:
    """Let ``writer(temporary_path)`` produce the file (e.g. matplotlib's ``savefig``), then move it into
    place atomically; an exception of ``writer`` leaves ``path`` untouched."""
    with atomic_path(path, option) as temporary:
        writer(temporary)


def _plain(value):
    """``value`` with non-finite floats as ``None`` and non-string keys as strings (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def json_text(document) -> str:
    """Strict JSON (RFC 8259) of a result document: ``inf``/``nan`` become ``null`` (a plain
    ``json.dumps`` would write the invalid tokens ``Infinity``/``NaN``), indented by 2."""
    return json.dumps(_plain(document), indent=2, allow_nan=False)
