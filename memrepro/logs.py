"""How memrepro's log lines look, and progress bars that do not cut through them.

The console gets the message alone (a warning says it is one); the command's log file keeps Hydra's stamp of
time, logger and level (``conf/hydra/job_logging/memrepro.yaml``). While a progress bar is drawn, log lines are
written above it (tqdm's ``logging_redirect_tqdm``), never through it. The standard library only at import.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator


class ConsoleFormatter(logging.Formatter):
    """``message`` for information, ``warning: message`` for a warning, ``error: message`` above."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return f"error: {text}"
        if record.levelno >= logging.WARNING:
            return f"warning: {text}"
        return text


@contextlib.contextmanager
def above_progress_bars() -> Iterator[None]:
    """Log lines go above any tqdm progress bar drawn inside the block (the root logger's console handlers)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(loggers=[logging.getLogger()]):
        yield
