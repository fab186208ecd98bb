"""SIGINT/SIGTERM handling of the command line: stop the solve within a second, keep the best answer.

The command line calls :func:`install` once. From then on:

* A signal in pure-Python solver code raises :class:`Interrupted` at once in the main thread. The
  front-end (:func:`packplace.run.solve_with`) catches it and finalises the best answer the solver
  offered to its run so far (:meth:`packplace.run.Run.offer`; status ``feasible``, ``interrupted:
  true``), or none (``unknown``). :func:`offer` here is the same channel for backends written before the
  run object (the front-end prefers it when one was used).
* A signal while native code runs (CP-SAT's ``Solve``, entered through :func:`native`) cannot run a
  Python handler until that call returns, so a watcher thread woken through
  :func:`signal.set_wakeup_fd` calls the solver's stop function (``CpSolver.stop_search``); the solver
  returns its best solution normally and the result is marked interrupted.
* The CLI then prints the answer, writes no output file, and exits ``128 + signal`` (130 for SIGINT,
  143 for SIGTERM).

Library calls without :func:`install` behave as Python does by default (``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: Signals handled by :func:`install`.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):  # noqa: N818 - it is not an error; BaseException like KeyboardInterrupt
    """A handled SIGINT/SIGTERM; ``signum`` is the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (Interrupted, (self.signum,))


class _State:
    def __init__(self) -> None:
        self.installed = False
        self.signum: int | None = None
        self.native_depth = 0
        self.stoppers: list[Callable[[], Any]] = []
        self.incumbent: Any = None
        self.lock = threading.Lock()


_state = _State()


def requested() -> int | None:
    """The signal number received by this process (it stays set: a command stops after one), or None."""
    return _state.signum


def reset() -> None:
    """Forget the incumbent (the front-end calls it before each solve)."""
    _state.incumbent = None


def offer(solution: Any) -> None:
    """Record ``solution`` as the solver's best answer so far (cheap: a reference is kept; it is scored
    by the evaluator only if the run is interrupted). Solvers call it whenever they improve."""
    _state.incumbent = solution


def incumbent() -> Any:
    """The last :func:`offer`-ed solution, or None."""
    return _state.incumbent


def _stop_native() -> None:
    with _state.lock:
        stoppers = list(_state.stoppers)
    for stop in stoppers:
        with contextlib.suppress(Exception):
            stop()


def _handler(signum: int, frame: Any) -> None:
    _state.signum = signum
    if _state.native_depth:
        _stop_native()
        return
    raise Interrupted(signum)


def _watch(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if _state.native_depth:
            _state.signum = _state.signum or data[-1]
            _stop_native()


def install() -> None:
    """Install the handlers (main thread only; idempotent)."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_fd,), name="packplace-signal-watcher", daemon=True).start()
    for signum in SIGNALS:
        signal.signal(signum, _handler)
    _state.installed = True


@contextlib.contextmanager
def native(stop: Callable[[], Any]) -> Iterator[None]:
    """Around a blocking native call: a signal calls ``stop()`` (from the watcher thread) instead of
    raising, and the call is expected to return its best answer soon after."""
    with _state.lock:
        _state.stoppers.append(stop)
        _state.native_depth += 1
    try:
        if _state.signum is not None:
            stop()
        yield
    finally:
        with _state.lock:
            _state.native_depth -= 1
            _state.stoppers.remove(stop)


def exit_code(signum: int) -> int:
    """``128 + signum``: 130 for SIGINT, 143 for SIGTERM (the shell convention)."""
    return 128 + signum
