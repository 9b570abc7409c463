"""``Searcher`` lives in ``evidra.env.environment`` beside the ``SearchRequest`` that holds one, and
stays importable from ``evidra.env.search``, where methods have always imported it."""

from __future__ import annotations

from evidra.env import environment, search


def test_search_re_exports_the_one_searcher_protocol() -> None:
    assert search.Searcher is environment.Searcher
