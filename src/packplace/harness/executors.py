"""How :func:`packplace.harness.comparison.compare` runs its instances: a process pool or Ray tasks.

* ``process`` (:func:`run_pool`): a :class:`concurrent.futures.ProcessPoolExecutor` of ``jobs``
  workers, started with ``fork`` where the platform has it (Linux), so solvers registered at run
  time (e.g. in a test) are visible in the workers; with ``spawn`` (macOS/Windows) only solvers
  registered on import are. Workers ignore SIGINT; on an interrupt the parent terminates them.
* ``ray`` (:func:`run_ray`): one Ray task (one CPU) per instance, on the cluster at ``address`` or
  a local Ray started for the run; Ray is an optional dependency (``packplace[ray]``).

Each instance's outcome comes back to the parent, which puts them in suite order. A backend that
overruns its time limit is not killed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from packplace.errors import ConfigError
from packplace.harness.suites import InstanceSpec

#: How :func:`~packplace.harness.comparison.compare` runs its instances.
EXECUTORS = ("process", "ray")
#: Seconds :func:`probe_ray_address` waits for a TCP connection to a ``host:port`` cluster address before
#: ``ray.init`` runs (which retries an unreachable GCS for minutes): a head node on the network answers a
#: connect within one round trip; the rest is room for a slow network.
RAY_PROBE_TIMEOUT_S = 10.0

#: ``failed(spec, solver names, message) -> outcome``: the outcome of an instance whose worker failed.
Failed = Callable[[InstanceSpec, Sequence[str], str], dict[str, Any]]


def run_pool(task: Callable[..., dict[str, Any]], failed: Failed, specs: Sequence[InstanceSpec], workers: int,
             finished: Callable[[dict[str, Any]], None], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> list[InstanceSpec]:
    """Run ``task(problem, spec, names, limit, seed, **kwargs)`` (``args`` holds the four) on ``specs`` in a
    pool of ``workers`` processes, calling ``finished`` with each outcome (``failed(spec, names, message)``
    where the result could not come back); returns the specs left unfinished because a worker process
    died (``BrokenProcessPool``). On SIGINT/SIGTERM (:class:`packplace.interrupt.Interrupted`) the
    workers are terminated before the exception propagates: no worker outlives the command."""
    problem, names, limit, run_seed = args
    broken: list[InstanceSpec] = []
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp_context(), initializer=quiet_worker_signals)
    try:
        futures = {pool.submit(task, problem, spec, names, limit, run_seed, **kwargs): spec for spec in specs}
        for future in as_completed(futures):
            spec = futures[future]
            try:
                outcome = future.result()
            except BrokenProcessPool:
                broken.append(spec)
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result: that instance's cells only
                outcome = failed(spec, names, f"worker process failed: {type(exc).__name__}: {exc}")
            finished(outcome)
    except BaseException:
        terminate(pool)
        raise
    pool.shutdown(wait=True)
    return sorted(broken, key=lambda spec: spec.index)


def import_ray() -> Any:
    """The ``ray`` module, or a ConfigError with the install command."""
    try:
        import ray  # optional dependency (packplace[ray])
    except ImportError:
        raise ConfigError("executor: 'ray' needs Ray; run: pip install 'packplace[ray]'") from None
    return ray


def probe_ray_address(address: str | None, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) cluster address nothing answers on within ``timeout_s``
    (one TCP connect), before ``ray.init`` retries it for minutes; ``auto``, ``local`` and None are Ray's own
    to resolve and pass unprobed.

    Raises:
        ConfigError: no TCP connection to the address (``address: cannot start or reach Ray at ...``).
    """
    if address is None:
        return
    target = address[len("ray://"):] if address.startswith("ray://") else address
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(f"address: cannot start or reach Ray at {address}: no TCP connection within "
                          f"{timeout_s:g} s ({type(exc).__name__}: {exc})") from None


def run_ray(task: Callable[..., dict[str, Any]], failed: Failed, specs: Sequence[InstanceSpec], workers: int,
            finished: Callable[[dict[str, Any]], None], args: tuple[Any, ...], kwargs: dict[str, Any],
            address: str | None) -> None:
    """Run ``task`` on ``specs`` as Ray tasks (one CPU each), calling ``finished`` with each outcome (as
    :func:`run_pool`).

    Connects to the cluster at ``address`` (or the one this process already joined; a ``host:port`` address
    nothing answers on is refused first, :func:`probe_ray_address`), else starts a local Ray with ``workers``
    CPUs and stops it afterwards. A task whose worker died or raised gives ``error``
    cells naming the cause (Ray already retried a dead worker's task once: ``max_retries=1``); on
    SIGINT/SIGTERM the pending tasks are cancelled before the exception propagates.
    """
    ray = import_ray()
    problem, names, limit, run_seed = args
    started_here = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.ERROR}
        if address is None:
            options["num_cpus"] = workers
        probe_ray_address(address)
        try:
            ray.init(address=address, **options)
        except Exception as exc:  # noqa: BLE001 - a cluster that cannot be reached is the user's input
            raise ConfigError(f"address: cannot start or reach Ray at {address or 'a local cluster'}: "
                              f"{type(exc).__name__}: {exc}") from None
        started_here = True
    task = ray.remote(num_cpus=1, max_retries=1)(task)
    pending = {task.remote(problem, spec, names, limit, run_seed, **kwargs): spec for spec in specs}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                spec = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a dead worker or a task error: that instance only
                    message = f"ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    outcome = failed(spec, names, message)
                finished(outcome)
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            ray.shutdown()


def quiet_worker_signals() -> None:
    """In a pool worker: the parent alone handles SIGINT/SIGTERM. A forked worker inherits the command's
    handlers, which would raise :class:`packplace.interrupt.Interrupted` wherever the worker is — also while
    it waits for work, where multiprocessing prints a traceback. So Ctrl-C (sent to the whole foreground
    process group) is ignored here, and the parent's ``terminate()`` (SIGTERM) ends the worker at once."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def terminate(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel queued work and terminate (then kill) its worker processes."""
    processes = list(getattr(pool, "_processes", {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join(1.0)
    pool.shutdown(wait=False, cancel_futures=True)


def mp_context() -> Any:
    return multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
