"""The protocol check: the known ways a reported retrieval number misleads, said as findings (docs/checks.md).

A finding is one of a closed list of kinds (:data:`KINDS`), each with a stable code, what it means and its fix; an
instance says in one sentence what this run or comparison shows (which metrics, how many queries, which files).
Every fact comes from a run's own files (its config, ``metrics.json``, its per-query rows: candidate pool, returned
list length, split, conversation) and from what the papers' numbers were computed on
(``memrepro/reference/paper_settings.yaml``), so a table renders the same findings on every machine.

Where the check runs: ``run`` and ``eval`` store the findings in ``metrics.json`` (never in the run id) and print
them; ``compare`` prints them above its numbers; ``leaderboard`` and ``tables`` mark the cells that carry one
(a bracketed tag, explained under the table); ``python -m memrepro check RUN_FOLDER...`` checks on demand.
Functions for other readers (the HTML report): :func:`check_run`, :func:`check_comparison`,
:func:`check_paper_cell`.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from memrepro.errors import EXIT_BAD_INPUT, MemreproError, UnknownNameError
from memrepro.evaluation.metrics import LIST_DEFINED, SET_BASES, parse_metric


@dataclass(frozen=True)
class Kind:
    """One kind of finding: its stable code, the letter a table cell carries, what it means, and its fix."""

    code: str
    tag: str
    title: str
    fix: str


KINDS: tuple[Kind, ...] = (
    Kind("cutoff-at-pool", "P", "a metric's cutoff is at or above the candidate pool of some queries, so the top k "
         "holds the whole pool there and the metric cannot tell rankings apart",
         "report a cutoff below the smallest pool, or score only the queries whose pool is larger than the cutoff"),
    Kind("fixed-by-first-stage", "F", "a reranker of the first stage's top w is scored by a set metric (recall, "
         "hit) at k ≥ w, which its reordering cannot change",
         "compare the reranker on a metric that reads the order inside its window (MRR, H@1, nDCG, a cutoff below "
         "w) and report these columns as the first stage's"),
    Kind("deeper-than-list", "T", "a metric reads deeper than the ranked lists hold (a truncated run file, or lists "
         "cut at a fixed depth), so it is a lower bound of the system's score",
         "write (or rank) as deep as the candidate pool, or report only the metrics whose cutoff the lists reach"),
    Kind("split-leakage", "L", "a trained model is scored on conversations it was trained or tuned on",
         "use models trained on each split's own dev conversations (memrepro's per-seed recipes), or score only the "
         "splits whose test conversations the model never saw"),
    Kind("data-variant", "D", "the run read another data file (or other gold labels) than the paper's numbers "
         "were computed on", "read the paper's own file to compare with its numbers, or compare only with runs on "
         "the same file"),
    Kind("subset", "N", "the run scores fewer queries than the paper's number averages over",
         "run the full query set (every split seed, no limit) before setting the number beside the paper's"),
    Kind("substituted-model", "S", "a model stands in for the one the configuration or the paper names",
         "make the named model available (a local path or an offline bundle) and rerun; until then report the "
         "numbers as the substitute's"),
    Kind("latency-hardware", "H", "a latency is set beside one measured on other hardware",
         "compare latency as a ratio measured side by side in one process on one machine (`python -m memrepro "
         "bench`), not as milliseconds against another machine's"),
    Kind("tie-rule-differs", "R", "runs compared with each other froze their rankings under different tie rules",
         "rescore the run files under one tie rule (eval order=score) before comparing them"),
    Kind("metric-definition-differs", "M", "runs compared with each other define their gold or metric differently "
                                           "(loader options that decide the gold)",
         "compare only runs scored with the same gold rule and loader options"),
    Kind("query-sets-differ", "Q", "runs compared with each other scored different queries; the comparison is on "
                                   "the queries all of them scored",
         "rerun the runs on the same query set (the same split seeds and loader options) to compare all of them"),
)
BY_CODE: dict[str, Kind] = {kind.code: kind for kind in KINDS}
CODES: tuple[str, ...] = tuple(BY_CODE)



@dataclass(frozen=True)
class Finding:
    """One finding: its code (one of :data:`CODES`), one sentence saying what this run or comparison shows, the fix,
    the metrics it concerns (empty: every number of the run) and, in a comparison, which run."""

    code: str
    message: str
    fix: str = ""
    metrics: tuple[str, ...] = ()
    run: str = ""

    def __post_init__(self) -> None:
        if self.code not in BY_CODE:
            raise ValueError(f"unknown finding code {self.code!r} (valid: {', '.join(CODES)})")
        if not self.fix:
            object.__setattr__(self, "fix", BY_CODE[self.code].fix)

    @property
    def tag(self) -> str:
        return BY_CODE[self.code].tag

    def concerns(self, metric: str) -> bool:
        """Whether a number of ``metric`` carries this finding."""
        return not self.metrics or metric in self.metrics

    def line(self) -> str:
        where = f"{self.run}: " if self.run else ""
        return f"finding {self.code}: {where}{self.message}; fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "fix": self.fix, "metrics": list(self.metrics)}

    @classmethod
    def from_json(cls, document: Mapping[str, Any], run: str = "") -> "Finding":
        return cls(str(document["code"]), str(document["message"]), str(document.get("fix") or ""),
                   tuple(document.get("metrics") or ()), run)


class CheckInputError(MemreproError, ValueError):
    """A run folder that cannot be checked (absent, incomplete, damaged), or an unknown finding code: bad input."""

    exit_code = EXIT_BAD_INPUT


def valid_codes(codes: Iterable[str], where: str) -> tuple[str, ...]:
    """``codes`` checked against the closed list: an unknown one is one line naming the valid codes."""
    out = []
    for code in codes:
        if code not in BY_CODE:
            raise UnknownNameError("finding code", code, CODES, f"fix {where} (docs/checks.md lists each finding)")
        out.append(code)
    return tuple(out)


def without(findings: Iterable[Finding], ignore: Iterable[str] = ()) -> list[Finding]:
    """The findings whose code is not in ``ignore`` (already validated)."""
    skipped = set(ignore)
    return [f for f in findings if f.code not in skipped]


def tags(findings: Iterable[Finding]) -> str:
    """A table cell's mark: ``" [D,S]"`` (the tags in the order of :data:`KINDS`), or ``""`` without findings."""
    present = {f.code for f in findings}
    letters = [kind.tag for kind in KINDS if kind.code in present]
    return f" [{','.join(letters)}]" if letters else ""


def dumps(findings: Iterable[Finding]) -> str:
    """Findings as one JSON text (a table column: the reproduction matrix's ``findings``); ``[]`` when none."""
    return json.dumps([f.to_json() for f in findings], ensure_ascii=False)


def loads(text: str) -> list[Finding]:
    """The findings of :func:`dumps` (``""``: none); codes this version does not know are left out."""
    return [Finding.from_json(f) for f in json.loads(text or "[]") if f.get("code") in BY_CODE]


def legend(findings: Iterable[Finding]) -> list[str]:
    """Table notes for the tags used: one line per kind present, with the distinct messages behind it."""
    findings = list(findings)
    by_code: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for finding in findings:
        where = by_code[finding.code].setdefault(finding.message, [])
        if finding.run and finding.run not in where:
            where.append(finding.run)
    lines = []
    for kind in KINDS:
        if kind.code in by_code:
            shown = [f"{'; '.join(runs)}: {message}" if runs else message
                     for message, runs in by_code[kind.code].items()]
            examples = " | ".join(shown[:3]) + (f" | and {len(shown) - 3} more" if len(shown) > 3 else "")
            fixes = {f.fix for f in findings if f.code == kind.code}
            fix = fixes.pop() if len(fixes) == 1 else kind.fix  # the specific fix when every instance shares it
            lines.append(f"[{kind.tag}] {kind.code} (protocol check, docs/checks.md): {examples}. Fix: {fix}.")
    return lines


# ------------------------------------------------------------------------------------------------------------------
# what a check reads of a run


@dataclass
class RunView:
    """A run as the check reads it: its resolved config, its record and its per-query rows (a run folder, a kept
    copy read in place, or a run not yet written)."""

    config: Mapping[str, Any]
    record: Any  # memrepro.runs.record.RunRecord
    rows: list[dict[str, Any]]
    folder: Path | None = None

    @property
    def dataset(self) -> str:
        return self.record.dataset


# The per-query fields the check reads from a run's rows (never the rankings): a reader that has not parsed the
# rows reads only these (memrepro.runs.folder.read_row_fields). A test holds this list to the code below.
ROW_FIELDS = ("split", "seed", "episode_id", "excluded", "n_returned", "pool")


def _scored(run: Any) -> list[dict[str, Any]]:
    return [row for row in run.rows if row.get("excluded") is None]


def _cutoffs(metric_names: Iterable[str]) -> dict[str, tuple[str, int | None]]:
    out: dict[str, tuple[str, int | None]] = {}
    for name in metric_names:
        try:
            out[name] = parse_metric(name)
        except ValueError:  # a metric registered in another process: its definition is not known here
            continue
    return out


def _join(names: Sequence[str]) -> str:
    return ", ".join(names)


# ------------------------------------------------------------------------------------------------------------------
# findings of one run


def check_run(run: Any, pools: Mapping[str, int] | None = None) -> list[Finding]:
    """Every finding of one run (anything with ``config``, ``record`` and ``rows``: a :class:`RunView`, a
    :class:`memrepro.tables.runs.Run`). ``pools``: ``{episode id: memories}`` for rows that do not record their
    candidate pool (runs written before they did; :func:`memrepro.cli.check.episode_pools` reads them from the
    data)."""
    found: list[Finding] = []
    for check in (_cutoff_at_pool, _fixed_by_first_stage, _deeper_than_list):
        found += check(run, pools)
    for check in (_split_leakage, _data_variant, _subset, _substituted_models):
        found += check(run)
    return found


def _pool(row: Mapping[str, Any], pools: Mapping[str, int] | None) -> int | None:
    size = row.get("pool")
    if size is None and pools is not None:
        size = pools.get(row.get("episode_id"))
    return size


def _cutoff_at_pool(run: Any, pools: Mapping[str, int] | None) -> list[Finding]:
    sizes = [size for size in (_pool(row, pools) for row in _scored(run)) if size is not None]
    if not sizes:
        return []
    parts, metrics = [], []
    for name, (base, k) in _cutoffs(run.record.metric_names).items():
        if base in SET_BASES and k is not None:
            covered = sum(size <= k for size in sizes)
            if covered:
                parts.append(f"{name} on {covered:,} of {len(sizes):,} scored queries")
                metrics.append(name)
    if not parts:
        return []
    return [Finding("cutoff-at-pool", f"{_join(parts)}: there the candidate pool holds no more memories than the "
                    f"cutoff, so the top k is the whole pool and the metric counts only whether the list left a gold "
                    f"memory out, not how it ranked them",
                    f"report a cutoff below the smallest pool ({min(sizes)} memories here), or score only the "
                    f"queries whose pool is larger than the cutoff", tuple(metrics))]


def rerank_window(retriever: Mapping[str, Any]) -> tuple[int, str] | None:
    """``(w, what)`` for a retriever config that reorders only its first stage's top w (the v2 cascade's
    ``protected``, the full-pool reranker's ``pool``, ConvMemory v1's pool of raw dense's top ``model.pool``); None
    for any other."""
    target = str(retriever.get("_target_", ""))
    if target.endswith("CascadeRetriever"):
        return int(retriever.get("protected", 10)), "cascade"
    if target.endswith("FullPoolRetriever"):
        return int(retriever.get("pool", 500)), "full-pool reranker"
    if target.endswith("ConvMemoryV1Retriever"):  # v1 reorders raw dense's top `pool` and appends the rest
        return int((retriever.get("model") or {}).get("pool", 500)), "ConvMemory v1 reranker"
    return None


def _fixed_by_first_stage(run: Any, pools: Mapping[str, int] | None = None) -> list[Finding]:
    retriever = run.config.get("retriever") or {}
    window = rerank_window(retriever)
    if window is None:
        return []
    w, what = window
    fixed = [name for name, (base, k) in _cutoffs(run.record.metric_names).items()
             if base in SET_BASES and (k is None or k >= w)]
    if not fixed:
        return []
    described = run.record.retriever.get("first_stage") if isinstance(run.record.retriever, Mapping) else None
    first = (described or {}).get("name") if isinstance(described, Mapping) else None
    first = first or str((retriever.get("first_stage") or {}).get("_target_", "raw dense")).rsplit(".", 1)[-1]
    return [Finding("fixed-by-first-stage", f"{_join(fixed)} of this {what} cannot differ from its own first "
                    f"stage's ({first}, as computed inside this run): it reorders only the first stage's top {w}, so "
                    f"its top k for any k ≥ {w} holds the first stage's memories (a separately computed {first} run "
                    f"differs only where its own rankings do)",
                    f"compare it on a metric that reads the order inside the top {w} (mrr, hit@1, ndcg@10 or a "
                    f"cutoff below {w}) and report these columns as {first}'s", tuple(fixed))]


RUN_FIX = "rank up to {pool} memories per query (a larger retriever.k) for exact scores"


RUN_FILE_FIX = "write up to {pool} memories per query for exact scores (a memrepro run: output.top_n={pool})"


def truncation(depth: int, pools: Sequence[int], metric_names: Sequence[str], source: str
               ) -> tuple[str, tuple[str, ...], int] | None:
    """Lists cut at ``depth`` (a run file's depth, a run's fixed list length) while some scored query's candidate
    pool (``pools``) is larger: ``(what that means, the metrics that are then lower bounds, the largest such pool)``,
    or None when every pool fits or no metric reads deeper than ``depth``. Metrics without a cutoff, or cut deeper
    than ``depth``, are lower bounds of the system's scores; those cut at most at ``depth`` are exact; PersonaBench's
    are defined on the returned list itself."""
    deeper = [size for size in pools if size > depth]
    if not depth or not deeper:
        return None
    cutoffs = {}
    for name in metric_names:
        try:
            base, k = parse_metric(name)
        except ValueError:  # registered in another process: its definition is not known here
            continue
        if base not in LIST_DEFINED:
            cutoffs[name] = k
    bounded = [name for name, k in cutoffs.items() if k is None or k > depth]
    if not bounded:
        return None
    exact = [name for name, k in cutoffs.items() if k is not None and k <= depth]
    pool = max(deeper)
    message = (f"{source} ranks at most {depth} memories per query, fewer than the candidate pool of {len(deeper)} "
               f"of {len(pools)} scored queries (up to {pool}): if the system ranked deeper (a file truncated at "
               f"depth {depth}), {', '.join(bounded)} "
               + ("is a lower bound of its score" if len(bounded) == 1 else "are lower bounds of its scores")
               + (f" and {', '.join(exact)} exact" if exact else ""))
    return message, tuple(bounded), pool


def deeper_than_list(depth: int, pools: Sequence[int], metric_names: Iterable[str], source: str,
                     fix: str | None = None) -> Finding | None:
    """The finding of lists cut at ``depth`` while some scored query's candidate pool is larger
    (:func:`truncation`); ``fix`` has ``{pool}`` for the largest such pool (default: a run file's fix). None when
    nothing is bounded."""
    found = truncation(depth, list(pools), list(metric_names), source)
    if found is None:
        return None
    message, bounded, pool = found
    return Finding("deeper-than-list", message, (fix or RUN_FILE_FIX).format(pool=pool), bounded)


def _deeper_than_list(run: Any, pools: Mapping[str, int] | None) -> list[Finding]:
    rows = _scored(run)
    sizes = [_pool(row, pools) for row in rows]
    if not rows or any(size is None for size in sizes):
        return []
    depth = max(int(row.get("n_returned") or 0) for row in rows)
    external = run.record.provenance.run_file
    k = (run.config.get("retriever") or {}).get("k")
    if not external and isinstance(k, int) and not isinstance(k, bool) and depth < k:
        return []  # no list reached the retriever's k: they end by the method's own rule (a similarity floor)
    finding = deeper_than_list(depth, sizes, run.record.metric_names, str(external["path"]) if external else
                               "this run", None if external else RUN_FIX)
    return [finding] if finding else []


def _trained_models(run: Any) -> list[tuple[str, dict[str, list[str] | None], bool]]:
    """``(what, {split: conversations its model saw}, assumed)`` for each trained model family of a run: recorded
    by the run (``trained_on`` in its retriever's description), else from the published checkpoints its config
    names (runs written before the record said it)."""
    found: list[tuple[str, dict[str, list[str] | None], bool]] = []
    configured = (run.config.get("retriever") or {}).get("cross_encoder") or {}
    _recorded_training(run.record.retriever, "", configured, found)
    if found:
        return found
    splits = sorted({row["split"] for row in run.rows})
    _published_training(run.config.get("retriever") or {}, "model", splits, found)
    return found


# The walks below are module functions, not closures over the run: a recursive closure is a reference cycle that
# would keep a run's rows alive until the next garbage collection.
def _recorded_training(node: Any, name: str, configured: Any, found: list) -> None:
    """What the retriever description ``node`` records its trained models saw (``configured``: the run's
    ``retriever.cross_encoder`` config, naming a published reranker whose training data is assumed)."""
    from memrepro.artifacts.published import trained_on

    if not isinstance(node, Mapping):
        return
    here = str(node.get("name") or name)
    if isinstance(node.get("trained_on"), Mapping):
        found.append((f"{_model_name(here)} models", dict(node["trained_on"]), False))
    if isinstance(node.get("cross_encoder_trained_on"), Mapping):
        known = trained_on(configured.get("published")) if isinstance(configured, Mapping) else None
        found.append(("cross-encoder models", dict(node["cross_encoder_trained_on"]),
                      bool(known and known.assumed)))  # what the published reranker saw is undocumented
    for key, value in node.items():
        _recorded_training(value, here if key != "first_stage" else "", configured, found)


def _published_training(node: Any, what: str, splits: list[str], found: list) -> None:
    """What the published checkpoints the retriever config ``node`` names saw, for every split of ``splits``."""
    from memrepro.artifacts.published import trained_on

    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        if key == "published" and isinstance(value, str):
            known = trained_on(value)
            if known is not None:
                found.append((f"{what} checkpoint {value}", {s: list(known.episodes) for s in splits},
                              known.assumed))
        elif isinstance(value, Mapping):
            _published_training(value, "cross-encoder" if key == "cross_encoder" else "ConvMemory v1"
                                if key in ("model", "first_stage") else what, splits, found)


def _model_name(name: str) -> str:
    return {"convmemory_v1": "ConvMemory v1"}.get(name, name or "model")


def _split_leakage(run: Any) -> list[Finding]:
    test: dict[str, set[str]] = defaultdict(set)
    questions: dict[str, Counter] = defaultdict(Counter)
    for row in _scored(run):
        if row.get("episode_id") is None:  # rows that do not say which episode: nothing to compare
            continue
        test[row["split"]].add(row["episode_id"])
        questions[row["split"]][row["episode_id"]] += 1
    out = []
    total = sum(sum(c.values()) for c in questions.values())
    for what, seen, assumed in _trained_models(run):
        leaks, n = [], 0
        for split in sorted(test, key=_split_order):
            overlap = sorted(test[split] & set(seen.get(split) or ()))
            if overlap:
                leaks.append(f"{split}: {', '.join(overlap)}")
                n += sum(questions[split][e] for e in overlap)
        if leaks:
            out.append(Finding("split-leakage", f"the {what} saw in training conversations it is scored on"
                               f"{' (assumed: its training data is undocumented)' if assumed else ''}: {n:,} of "
                               f"{total:,} scored questions ({'; '.join(leaks)})"))
    return out


def _split_order(name: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else 0, name)


def paper_of(dataset: str) -> Mapping[str, Any] | None:
    """What the papers' numbers on ``dataset`` were computed on (``paper_settings.yaml``), None for a benchmark no
    paper reports."""
    from memrepro.reference import paper_settings

    return paper_settings().get(dataset)


def _data_variant(run: Any) -> list[Finding]:
    paper = paper_of(run.dataset)
    if paper is None:
        return []
    out = []
    files = [f for f in run.record.provenance.files]
    expected = paper["data_files"]
    if isinstance(expected, Mapping):  # the benchmark's own pinned release
        pins = _catalogue_pins()
        prefix = expected["pinned"]
        off = [f for f in files if str(f["path"]).startswith(prefix) and pins.get(f["path"]) != f["sha256"]]
        if off:
            shown = _join([f"{f['path']} (sha256 {f['sha256'][:12]}…)" for f in off[:3]])
            out.append(Finding("data-variant", f"this run read {shown}, which is not the file {paper['paper']} "
                               f"used ({expected['note']})"))
    else:
        theirs = {f["sha256"] for f in expected}
        ours = {f["sha256"] for f in files}
        if ours != theirs:
            read = _join([f"{f['path']} (sha256 {f['sha256'][:12]}…)" for f in files[:3]])
            used = _join([f"{f['name']} (sha256 {f['sha256'][:12]}…, {f['note']})" for f in expected])
            out.append(Finding("data-variant", f"this run read {read}, not the file {paper['paper']} used: {used}"))
    options = run.record.provenance.loader_options
    labels = options.get("gold_labels") if isinstance(options, Mapping) else None
    if isinstance(labels, Mapping) and labels.get("mode") == "corrected":
        out.append(Finding("data-variant", f"this run is scored with corrected gold labels ({labels.get('file')}, "
                           f"version {labels.get('version')}: {labels.get('corrected')} questions), "
                           f"{paper['paper']} with the original ones",
                           "compare it with the paper only through a run with dataset.gold_labels=original, or "
                           "with runs scored on the same corrections"))
    return out


@lru_cache(maxsize=1)
def _catalogue_pins() -> dict[str, str]:
    from memrepro.datasets.catalogue import catalogue

    return {entry.path: entry.sha256 for entry in catalogue() if entry.sha256}


def _subset(run: Any) -> list[Finding]:
    paper = paper_of(run.dataset)
    n = run.record.counts.n_scored
    if paper is None or not n or n >= int(paper["n_scored"]):
        return []
    seeds = sorted({row.get("seed") for row in run.rows if row.get("seed") is not None})
    options = run.record.provenance.loader_options
    detail = (f" (split seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})" if seeds
              else f" (limit={options['limit']})" if isinstance(options, Mapping) and options.get("limit") else "")
    return [Finding("subset", f"this run scores {n:,} queries{detail}, where the numbers of {paper['paper']} "
                    f"average over {int(paper['n_scored']):,}: its numbers are over a subset of the paper's queries")]


_SUBSTITUTE = re.compile(r"(?:from )?(?P<used>[\w./-]+) \((?:[^()]*; )?substitute for (?P<wanted>[\w./-]+)\)")


def _substitutes_named(node: Any, found: dict[tuple[str, str], None]) -> None:
    """Every "X (substitute for Y)" a retriever description's texts name, as (X, Y) keys of ``found``."""
    if isinstance(node, str):
        for match in _SUBSTITUTE.finditer(node):
            found[(match["used"], match["wanted"])] = None
    elif isinstance(node, Mapping):
        for value in node.values():
            _substitutes_named(value, found)


def _substituted_models(run: Any) -> list[Finding]:
    """Substitutions a run recorded: an encoder loaded in place of the one asked for (``resolved.substitute_for``),
    a cross-encoder fine-tuned from an offline backbone in place of the configured base."""
    found: dict[tuple[str, str], None] = {}
    encoder = run.record.encoder if isinstance(run.record.encoder, Mapping) else {}
    resolved = encoder.get("resolved") if isinstance(encoder.get("resolved"), Mapping) else {}
    if resolved.get("substitute_for"):
        found[(str(resolved.get("name") or encoder.get("model")), str(resolved["substitute_for"]))] = None

    _substitutes_named(run.record.retriever, found)
    return [Finding("substituted-model", f"{used} stands in for {wanted} (not available here): the numbers are the "
                    f"substitute's", f"make {wanted} available (a local path or an offline bundle) and rerun; until "
                    f"then report the numbers as {used}'s") for used, wanted in found]


# ------------------------------------------------------------------------------------------------------------------
# a run beside a paper cell


def check_paper_cell(run: Any, metric: str | None, *, encoder: str | None = None, latency: bool = False,
                     findings: Sequence[Finding] | None = None) -> list[Finding]:
    """The findings a paper table cell showing ``run``'s ``metric`` carries: the run's own (those that concern the
    metric; for a latency or count cell, ``metric`` None, those that concern every number), a model other than the
    paper's for that cell (``encoder``: the paper's encoder of the cell's block), and, for a latency cell
    (``latency``), hardware other than the paper's. ``findings``: the run's :func:`check_run`, when the caller has
    it."""
    own = check_run(run) if findings is None else list(findings)
    out = [f for f in own if f.concerns(metric)] if metric and not latency else [f for f in own if not f.metrics]
    ours = str((run.record.encoder or {}).get("model") or (run.record.encoder or {}).get("label") or "")
    if encoder and ours and _short_model(ours) != _short_model(encoder):
        out.append(Finding("substituted-model", f"{_short_model(ours)} stands in for {encoder}, the encoder of this "
                           f"paper cell", f"run with {encoder} to compare with this cell"))
    if latency:
        out.append(_latency_hardware(run))
    return out


def _short_model(name: str) -> str:
    return name.split("sentence-transformers/", 1)[-1]


def hardware_text(hardware: Mapping[str, Any] | None) -> str:
    """A run's timing hardware in words: ``cpu (2 CPUs)``, ``cuda: NVIDIA H100 (16 CPUs)``."""
    if not hardware:
        return "hardware it did not record"
    device = str(hardware.get("device") or "?")
    gpu = f": {hardware['gpu']}" if hardware.get("gpu") else ""
    return f"{device}{gpu} ({hardware.get('cpu_count') or '?'} CPUs)"


def _latency_hardware(run: Any) -> Finding:
    paper = paper_of(run.dataset) or {}
    theirs = paper.get("latency_hardware")
    where = theirs if theirs else "hardware it does not name"
    return Finding("latency-hardware", f"{paper.get('paper', 'the paper')} timed this column on {where}, this run on "
                   f"{hardware_text(run.record.provenance.hardware)}: the milliseconds are not comparable")


# ------------------------------------------------------------------------------------------------------------------
# runs compared with each other


def check_comparison(runs: Sequence[Any], names: Sequence[str] | None = None,
                     metric: str | None = None) -> list[Finding]:
    """The findings of comparing ``runs``: each run's own (``run`` set to its name), then what differs between them
    (tie rule, gold or metric definition, the queries they scored). ``names``: how to call each run (default: its
    folder name); ``metric``: the metric whose units are compared (default: the first run's first primary)."""
    names = list(names or [_name(run, i) for i, run in enumerate(runs)])
    out: list[Finding] = []
    for run, name in zip(runs, names):
        out += [Finding(f.code, f.message, f.fix, f.metrics, name) for f in check_run(run)]
    return out + check_between(runs, names, metric)


def check_between(runs: Sequence[Any], names: Sequence[str], metric: str | None = None) -> list[Finding]:
    """What differs between compared runs (:func:`check_comparison` without each run's own findings): the tie
    rule, the gold or metric definition, the queries they scored."""
    out: list[Finding] = []
    rules = {name: run.record.provenance.tie_rule for run, name in zip(runs, names)}
    if len(set(rules.values())) > 1:
        out.append(Finding("tie-rule-differs", "the runs froze their rankings under different tie rules: "
                           + "; ".join(f"{name}: {rule}" for name, rule in rules.items())))
    defined = [_gold_options(run) for run in runs]
    differ = sorted({k for options in defined for k in options if any(o.get(k) != options.get(k) for o in defined)})
    if differ:
        out.append(Finding("metric-definition-differs", "the runs define their gold differently: "
                           + "; ".join(f"{name}: " + ", ".join(f"{k}={options.get(k)}" for k in differ)
                                       for name, options in zip(names, defined))))
    units = [set(units_of(run, metric)) for run in runs]
    common = set.intersection(*units) if units else set()
    if units and any(u != common for u in units):
        dropped = "; ".join(f"{len(u - common):,} only in {name}" for u, name in zip(units, names) if u - common)
        out.append(Finding("query-sets-differ", f"the runs scored different queries: compared on the {len(common):,} "
                           f"(split, query) units all of them scored, dropping {dropped}"))
    return out


# loader options that decide a run's query units or its gold (seeds only choose which splits are scored)
_NOT_GOLD = frozenset({"seeds", "file", "source", "reader", "limit"})


def _gold_options(run: Any) -> dict[str, Any]:
    options = run.record.provenance.loader_options
    plain = dict(options) if isinstance(options, Mapping) else {}
    return {k: json.dumps(v, sort_keys=True, default=str) if isinstance(v, (Mapping, list)) else v
            for k, v in plain.items() if k not in _NOT_GOLD}


def units_of(run: Any, metric: str | None = None) -> dict[str, float]:
    """``{"split::query_id": value}`` of the scored rows (``metric``: the run's first primary metric by default)."""
    metric = metric or (run.record.primary[0] if run.record.primary else run.record.metric_names[0])
    return {f"{r['split']}::{r['query_id']}": r["metrics"].get(metric) for r in _scored(run)}


def _name(run: Any, index: int) -> str:
    folder = getattr(run, "folder", None)
    return Path(folder).name if folder is not None else f"run {index + 1}"


# ------------------------------------------------------------------------------------------------------------------
# what the commands print and the readers read


def stored_or_checked(run: Any, pools: Mapping[str, int] | None = None) -> list[Finding]:
    """The findings a run recorded when it was written, else :func:`check_run` of its files (runs written before
    the check existed)."""
    recorded = getattr(run.record, "findings", None)
    if recorded is not None:
        return [Finding.from_json(f) for f in recorded if f.get("code") in BY_CODE]
    return check_run(run, pools)


def say(findings: Sequence[Finding], ignore: Iterable[str] = ()) -> str:
    """The findings as printed under a run's summary or above a comparison: one line each (``""`` when none), and
    how many ``ignore`` hid."""
    shown = without(findings, ignore)
    lines = [f.line() for f in shown]
    if len(shown) < len(findings):
        lines.append(f"({len(findings) - len(shown)} finding(s) not shown: ignored {', '.join(sorted(set(ignore)))})")
    return "\n".join(lines)
