"""Run storage: what a run is called, where it lives, and how it is written, read back, resumed and kept.

- :mod:`~memrepro.runs.identity`: the run id (a hash of what decides a run's rankings and metrics).
- :mod:`~memrepro.runs.folder`: run folders, written atomically with the completion marker last, verified on read.
- :mod:`~memrepro.runs.record`: ``metrics.json``, one typed record with its schema version.
- :mod:`~memrepro.runs.resume`: the retrieval checkpoint a stopped run resumes from.
- :mod:`~memrepro.runs.seed_reuse`: splits taken from complete runs of the same config over fewer seeds.
- :mod:`~memrepro.runs.kept`: compressed copies of complete runs, committed under ``results/kept``.
- :mod:`~memrepro.runs.runfile`: external run files (TREC, JSONL) read into frozen rankings, and written.
"""
