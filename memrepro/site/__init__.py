"""The static HTML report (``python -m memrepro report``): a site built from the runs on this machine.

Pages: the reproduction summary and each paper table in its own layout (``matrix``), a page per run with its
settings, metrics, miss breakdown (``misses``) and per-query explorer (``texts``), comparisons of runs
(``comparisons``) and sweep summaries (``sweeps``). ``build`` writes them with Jinja2 templates and Plotly.js,
both shipped with the site, so it opens from disk with no server and no network.
"""
