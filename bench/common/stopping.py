"""Stop signals: SIGTERM and SIGUSR1 (what a scheduler sends before it ends a job) ask a command to stop within
seconds, keeping what it finished and exiting with EXIT_STOPPED, so that the same command with --resume continues.

The handler only records the signal (StopRequest). Training acts on it at the end of its step (bench.training.loop);
every other long phase (a checkpoint's evaluation, the probes and downstream tasks, an untrained control, the Bayes
references, tuning's fine-tuning) calls `check_stop` between its batches, fits and fine-tuning steps, which raises
PhaseStopped: the phase's unfinished work is dropped, never written, and redone by --resume. A shared helper, so
that the yardsticks, which the training package does not import, stop the same way.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

EXIT_STOPPED = 4  # exit status after a stop signal: the state is saved, rerun with --resume to continue
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


class RunStopped(SystemExit):
    """A stop signal arrived: what was finished is saved and the process should exit. A SystemExit, so the command
    exits with EXIT_STOPPED (rank 0; the other ranks with 0, as they do after a finished comparison) unless a caller
    catches it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(code)
        self.message = message


class PhaseStopped(Exception):
    """A stop signal arrived inside a phase that is not a training step: its unfinished work is dropped. Whoever
    runs the phase catches it where every process meets again (bench.training.runs), or the command's own stop
    scope (stop_on_signals) ends the command with it."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name


class StopRequest:
    """The signal handler: it only records the signal; the code acts on it where its state is whole."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name


_active_request: StopRequest | None = None  # the handler in place, so that nested scopes share one


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """SIGTERM and SIGUSR1 ask for a save and a clean exit; the previous handlers come back after. Installed once for
    a whole command (bench.compare), so that a signal arriving between steps (in an evaluation, the final probes,
    between runs) is honoured there; a nested scope (train_run, fit) shares the outer request. A PhaseStopped that
    reaches the outermost scope ends the command as a stopped run does: one line, EXIT_STOPPED. Python delivers
    signals to the main thread only, so elsewhere (a notebook's worker thread) nothing changes."""
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
    except PhaseStopped as stopped:
        raise command_stopped(stopped.signal_name) from None
    finally:
        _active_request = None
        for number, handler in previous.items():
            signal.signal(number, handler)


def command_stopped(signal_name: str) -> RunStopped:
    """The stop of a phase no process group waits on (the Bayes references before any run, tuning's fine-tuning):
    said once, by the first process (torchrun's RANK), as stop_message says it for a run."""
    first = os.environ.get("RANK", "0") == "0"
    message = (f"stopped by {signal_name} before the phase under way finished (what it had done is dropped, what "
               "finished before it is saved); run the same command with --resume to continue")
    if first:
        print(message, file=sys.stderr, flush=True)
    return RunStopped(message, EXIT_STOPPED if first else 0)


def current_stop_request() -> StopRequest:
    """The handler stop_on_signals installed (a fresh, never-signalled request outside one)."""
    return _active_request or StopRequest()


def check_stop() -> None:
    """Raise PhaseStopped where a stop signal has arrived; called between the batches, fits and steps of every long
    phase, so that a stop waits for one of them at most. Outside stop_on_signals no handler is installed, and a
    signal ends the process as it would any other."""
    if _active_request is not None and _active_request.signal_name is not None:
        raise PhaseStopped(_active_request.signal_name)
