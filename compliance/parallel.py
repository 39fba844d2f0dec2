"""Work spread over forked worker processes, with results kept in the order it was given.

The walk examines every byte of every file; on a large round that is seconds of CPU per
gigabyte, so batches of files go to one worker process per usable core. Workers are forked
(they inherit the open root directory handle and every module already imported) and send
back small per-batch results. Whatever cannot run in a worker runs in this process instead:
one usable core, no ``fork`` on this platform, a fork that fails, or a worker that dies
(its batches are redone here), so the results never depend on whether workers ran.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under ``taskset``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_workers() -> int:
    """Worker processes to use: one per usable core, none (1: this process) without ``fork``."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return usable_cores()


class OrderedWork(Generic[Item, Result]):
    """Runs ``work`` on submitted items in worker processes and yields every result, including the
    ones computed here with ``add``, in the order they were given."""

    def __init__(self, work: Callable[[Item], Result], workers: int) -> None:
        self._work = work
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._slots: list[tuple[Item, Future[Result]] | tuple[None, Result]] = []

    @property
    def parallel(self) -> bool:
        """True once workers run (``submit`` then hands items to them)."""
        return self._pool is not None

    def start(self) -> bool:
        """Fork the workers (False, and everything stays in this process, when that is not possible)."""
        if self._pool is None and self._workers > 1:
            try:
                self._pool = ProcessPoolExecutor(self._workers, mp_context=multiprocessing.get_context("fork"))
            except (OSError, ValueError):
                self._pool = None
        return self._pool is not None

    def add(self, result: Result) -> None:
        """Keep a result computed in this process, in its place in the order."""
        self._slots.append((None, result))

    def submit(self, item: Item) -> None:
        """Run ``work(item)`` in a worker if workers run, else here and now."""
        if self._pool is not None:
            try:
                self._slots.append((item, self._pool.submit(self._work, item)))
                return
            except (BrokenProcessPool, OSError, RuntimeError):
                self._stop()
        self.add(self._work(item))

    def results(self) -> Iterator[Result]:
        """Every result in order; an item whose worker died (or could not start) is redone here."""
        try:
            for item, slot in self._slots:
                if not isinstance(slot, Future):
                    yield slot
                    continue
                try:
                    yield slot.result()
                except (BrokenProcessPool, CancelledError, OSError):
                    assert item is not None
                    yield self._work(item)
        finally:
            self._stop()

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
