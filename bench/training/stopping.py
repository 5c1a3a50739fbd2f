"""Signals: SIGTERM and SIGUSR1 ask for a save at the next safe point and a clean exit (EXIT_STOPPED); every
process agrees on the stop.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import torch
from lightning_fabric import Fabric

EXIT_STOPPED = 4  # exit status after a stop signal: the state is saved, rerun with --resume to continue
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


class RunStopped(SystemExit):
    """A stop signal arrived: the state was saved at the end of a step and the process should exit. A SystemExit,
    so the command exits with EXIT_STOPPED (rank 0; the other ranks with 0, as they do after a finished comparison)
    unless a caller catches it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(code)
        self.message = message


class StopRequest:
    """The signal handler: it only records the signal; the loop acts on it once the step's state is whole."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name


_active_request: StopRequest | None = None  # the handler in place, so that nested scopes share one


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """SIGTERM and SIGUSR1 ask for a save and a clean exit; the previous handlers come back after. Installed once for
    a whole command (bench.compare), so that a signal arriving between steps (in an evaluation, the final probes,
    between runs) is still there at the next safe point; a nested scope (train_run, fit) shares the outer request.
    Python delivers signals to the main thread only, so elsewhere (a notebook's worker thread) nothing changes."""
    global _active_request
    if _active_request is not None:
        yield _active_request
        return
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {number: signal.signal(number, request) for number in STOP_SIGNALS}
    _active_request = request
    try:
        yield request
    finally:
        _active_request = None
        for number, handler in previous.items():
            signal.signal(number, handler)


def current_stop_request() -> StopRequest:
    """The handler stop_on_signals installed (a fresh, never-signalled request outside one)."""
    return _active_request or StopRequest()


def stop_agreed(fabric: Fabric, request: StopRequest) -> bool:
    """Whether any process was asked to stop, the same answer on every process (a collective: call it where all
    of them pass)."""
    asked = request.signal_name is not None
    if fabric.world_size == 1:
        return asked
    return bool(fabric.all_reduce(torch.tensor(float(asked), device=fabric.device), reduce_op="max").item())


def stop_message(fabric: Fabric, where: str, signal_name: str | None) -> RunStopped:
    message = (f"stopped by {signal_name or 'a signal to another process'} {where}; run the same command with "
               "--resume to continue")
    if fabric.is_global_zero:
        print(message, file=sys.stderr, flush=True)
    return RunStopped(message, EXIT_STOPPED if fabric.is_global_zero else 0)
