"""Runs ``python -m memrepro ...`` with one fault injected at a named point (the fault-injection tests' harness).

Usage: ``python tests/fault_wrapper.py <point> <signal> <after> -- <memrepro arguments>``. At the ``after``-th pass
through ``point`` the process sends itself ``signal`` (KILL, TERM, INT) or, for ``EROFS`` / ``ENOSPC``, the call
raises the error a read-only / full file system gives (a full disk's error names no file). Points:

* ``encode``: after a cache shard is fully stored (the encode is split into chunks of 4 texts);
* ``shard``: inside a shard write, after its ``.npy`` and metadata, before its ``.keys`` file;
* ``retrieve``: after a checkpoint flush (run with ``runtime.checkpoint_every_s=0``);
* ``commit``: between the two renames of an ``overwrite=true`` commit; ``commit-before``: before the rename of
  the finished temporary folder into place;
* ``results``: creating the run's temporary folder (with ``EROFS``: a read-only results directory);
* ``npy``: writing a cache shard's vectors, its temporary file open; ``fsync``: a run folder's file written, before
  it reaches the disk.
"""

from __future__ import annotations

import errno
import os
import signal
import sys


def _fire(sig: str, path: str = "") -> None:
    if sig == "EROFS":
        raise OSError(errno.EROFS, "Read-only file system", path)
    if sig == "ENOSPC":
        raise OSError(errno.ENOSPC, "No space left on device")
    os.kill(os.getpid(), getattr(signal, f"SIG{sig}"))  # TERM / INT unwind at the next bytecode


def install(point: str, sig: str, after: int) -> None:
    count = [0]

    def tick(path: str = "") -> None:
        count[0] += 1
        if count[0] == after:
            _fire(sig, path)

    if point == "encode":
        from memrepro.models import encoder

        init = encoder.CachedEncoder.__init__  # chunk_size=4 (its first default): several shards per encode
        init.__defaults__ = (4, *init.__defaults__[1:])
        store = encoder.EmbeddingCache.store

        def store_then_tick(self, keys, vectors):
            store(self, keys, vectors)
            tick()

        encoder.EmbeddingCache.store = store_then_tick
    elif point == "shard":
        from memrepro.models import cache

        write = cache._atomic_write_bytes

        def write_then_tick(path, data):
            if str(path).endswith(".keys"):
                tick()
            write(path, data)

        cache._atomic_write_bytes = write_then_tick
    elif point == "retrieve":
        from memrepro.runs import resume

        flush = resume.RetrievalCheckpoint.flush

        def flush_then_tick(self):
            had = bool(self._pending)
            flush(self)
            if had:
                tick()

        resume.RetrievalCheckpoint.flush = flush_then_tick
    elif point in ("commit", "commit-before"):
        from memrepro.runs import folder as results

        replace = os.replace

        class PatchedOs:
            def __getattr__(self, name):
                return getattr(os, name)

            @staticmethod
            def replace(src, dst):
                if point == "commit-before" and ".tmp-" in str(src):
                    tick()
                outcome = replace(src, dst)
                if point == "commit" and ".old-" in str(dst):
                    tick()
                return outcome

        results.os = PatchedOs()
    elif point == "results":
        from memrepro.runs import folder as results

        init = results.RunWriter.__init__

        def init_with_tick(self, final):
            tick(str(final.parent))
            init(self, final)

        results.RunWriter.__init__ = init_with_tick
    elif point == "npy":
        from memrepro.models import cache

        class PatchedNumpy:
            def __getattr__(self, name):
                return getattr(np, name)

            @staticmethod
            def save(handle, array):
                tick()
                return np.save(handle, array)

        import numpy as np

        cache.np = PatchedNumpy()
    elif point == "fsync":
        from memrepro.runs import folder as results

        class PatchedFsyncOs:
            def __getattr__(self, name):
                return getattr(os, name)

            @staticmethod
            def fsync(fd):
                tick()
                return os.fsync(fd)

        results.os = PatchedFsyncOs()
    else:
        raise SystemExit(f"unknown fault point {point!r}")


def main() -> int:
    point, sig, after, sep, *args = sys.argv[1:]
    assert sep == "--", sys.argv
    if sig == "INT":  # a shell's background job (`cmd &`, nohup) starts with SIGINT ignored, and Python keeps that
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the test stands for a Ctrl-C in a terminal
    install(point, sig, int(after))
    from memrepro.__main__ import main as memrepro_main

    return memrepro_main(args)


if __name__ == "__main__":
    sys.exit(main())
