"""The argument parser of memrepro's plain (non-Hydra) commands: argparse, with usage errors in one line.

argparse reports a bad argument as its usage block plus an error line; memrepro's contract is one line naming
what is wrong and the fix, and exit code 2 (bad input).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from memrepro.errors import EXIT_BAD_INPUT


def usage_error(prog: str, message: str, listed: str = "the options") -> str:
    """The one line of a usage mistake: the command, what is wrong, and where the valid options are listed."""
    return f"memrepro: error: {prog}: {message}; `{prog} --help` lists {listed}"


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line on stderr and exit code 2 (its sub-parsers too)."""

    def error(self, message: str) -> NoReturn:
        print(usage_error(self.prog, message), file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
