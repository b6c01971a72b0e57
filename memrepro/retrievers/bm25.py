"""BM25 (``retriever=bm25``): the lexical baseline both papers omit, on every benchmark.

Scored with ``bm25s`` (by default Lucene's BM25 variant, non-negative idf; every default is
:class:`memrepro.retrievers.schemas.BM25RetrieverConfig`'s), one index per episode, so term statistics (idf, average
length) come from the memories the query may search: the same scope as dense retrieval. Nothing is encoded
(``uses_vectors = False``). Text is tokenised by ``bm25s.tokenize`` (lower-case, words of 2+ characters, English
stop words removed; ``stemmer=english`` adds Snowball stemming when PyStemmer is installed). The query vector is
ignored.

``mode=full`` ranks every memory (memories sharing no term with the query score 0 and follow in pool order, the
tie rule); ``mode=topk`` keeps the ``k`` best, for the RF-Mem protocols whose metrics read the whole returned list
(PersonaBench K = 5 / 10, LongMemEval K = 50).
"""

from __future__ import annotations

import logging
from typing import Literal, Sequence

import numpy as np

from memrepro.retrievers.base import RetrievalInput, Retrieved, RetrieverBase
from memrepro.search import EpisodeIndex, Hits
from memrepro.parameters import validate_arguments
from memrepro.retrievers.schemas import BM25RetrieverConfig as Config


class BM25Retriever(RetrieverBase):
    ALGORITHM_VERSION = 1  # bump when a change alters its rankings: its old runs get new ids (runs/identity.py)
    order: Literal["score", "native"] = "score"
    uses_vectors = False  # the runner encodes nothing for it
    timed_region = "BM25 scoring of the query's episode (episode indexes built before the timed pass)"

    def __init__(self, mode: Literal["full", "topk"] = Config.mode, k: int | None = Config.k,
                 k1: float = Config.k1, b: float = Config.b, method: str = Config.method,
                 stopwords: str | None = Config.stopwords, stemmer: str | None = Config.stemmer,
                 name: str = Config.name) -> None:
        # defaults and ranges are the schema's (one declaration); checked as the config node is, with its message
        validate_arguments(Config, {"mode": mode, "k": k, "k1": k1, "b": b, "method": method,
                                    "stopwords": stopwords, "stemmer": stemmer, "name": name})
        self.mode, self.k, self.k1, self.b, self.method = mode, k, float(k1), float(b), method
        self.stopwords, self.stemmer_name, self.name = stopwords, stemmer, name
        self._stemmer = None
        if stemmer:
            import Stemmer  # PyStemmer (the check above refuses a stemmer when it is not installed)

            self._stemmer = Stemmer.Stemmer(stemmer)
        self._models: dict[tuple[int, str], object] = {}
        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG

    def _tokenize(self, texts: list[str], ids: bool):
        import bm25s

        return bm25s.tokenize(texts, stopwords=self.stopwords, stemmer=self._stemmer, show_progress=False,
                              return_ids=ids)

    def _model(self, index: EpisodeIndex, episode_id: str):
        key = (id(index), episode_id)
        if key not in self._models:
            import bm25s

            texts = [m.text for m in index.episodes[episode_id].memories]
            model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
            model.index(self._tokenize(texts, True), show_progress=False)
            self._models[key] = model
        return self._models[key]

    def prepare(self, index: EpisodeIndex) -> None:
        """Build every episode's index (outside any timed region)."""
        for episode_id in index.episode_ids:
            self._model(index, episode_id)

    def scores(self, text: str, index: EpisodeIndex, episode_id: str) -> np.ndarray:
        """BM25 score of every memory of the episode, in pool order (float32)."""
        n = len(index.episodes[episode_id])
        tokens = self._tokenize([text], False)[0]
        model = self._model(index, episode_id)
        known = [t for t in tokens if t in model.vocab_dict]
        if not known or n == 0:
            return np.zeros(n, dtype=np.float32)
        return np.asarray(model.get_scores(known), dtype=np.float32)

    def retrieve(self, queries: Sequence[RetrievalInput], query_vectors: np.ndarray,
                 index: EpisodeIndex) -> list[Retrieved]:
        out = []
        for query in queries:
            scores = self.scores(query.text, index, query.episode_id)
            positions = np.arange(len(scores), dtype=np.int64)
            if self.mode == "topk":
                keep = np.lexsort((positions, -scores.astype(np.float64)))[: self.k]  # the tie rule, then cut
                positions, scores = positions[keep], scores[keep]
            out.append(Retrieved(Hits(positions, scores)))
        return out

    def describe(self) -> dict:
        return {"name": self.name, "mode": self.mode, "k": self.k, "k1": self.k1, "b": self.b,
                "method": self.method, "stopwords": self.stopwords, "stemmer": self.stemmer_name}
