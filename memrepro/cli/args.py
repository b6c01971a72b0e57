"""The argument parser of memrepro's plain (non-Hydra) commands: argparse, with usage errors in one line.

argparse reports a bad argument as its usage block plus an error line; memrepro's contract is one line naming
what is wrong and the fix, and exit code 2 (bad input).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from memrepro.errors import EXIT_BAD_INPUT


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line on stderr and exit code 2 (its sub-parsers too)."""

    def error(self, message: str) -> NoReturn:
        print(f"memrepro: error: {self.prog}: {message}; `{self.prog} --help` lists the options", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
