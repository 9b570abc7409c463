from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_raw import raw_request as _raw

from evidra.corpus import PageStore
from evidra.retrieval.lifecycle.index_folder import build_index
from evidra.retrieval.service.client import AsyncSearchClient, SearchClient, SearchServiceError
from evidra.retrieval.service.loadtest import run_load
from evidra.retrieval.service.server import SearchService, ServiceOptions
from float_hits import assert_hits_close

logger = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def bm25_engine(synth_store: tuple[Path, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    store, corpus = synth_store
    return build_index(PageStore.open(store).pages(), tmp_path_factory.mktemp("svc") / "bm25", "bm25"), corpus


def test_malformed_requests_get_4xx(bm25_engine: Any) -> None:
    engine, _ = bm25_engine
    with SearchService(engine.retriever, n_pages=len(engine.index)).running() as url:
        client = SearchClient(url, timeout=10)
        http = httpx.Client(timeout=10, trust_env=False)  # requests the client would never send
        for body, status, fragment in [
            ({"queries": []}, 400, "non-empty list"),
            ({"queries": ["a"], "k": 0}, 400, '"k" must be'),
            ({"queries": ["a"], "k": "5"}, 400, '"k" must be'),
            ({"queries": ["a", "b"], "exclude": [[]]}, 400, '"exclude"'),
        ]:
            response = http.post(client.url, json=body)
            assert response.status_code == status and fragment in response.json()["error"]
        assert http.post(client.url, content=b"{oops").status_code == 400
        assert http.get(client.url).status_code == 405
        assert http.get(url + "/nope").status_code == 404
        assert http.get(url + "/health").json() == {
            "status": "ok",
            "pages": len(engine.index),
            "where": False,
        }
        status, body = _raw(
            url, b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999\r\nConnection: close\r\n\r\n"
        )
        assert status == 413 and "exceeds" in body["error"]
        with pytest.raises(SearchServiceError, match="400"):
            client.search(["a"], k=1000)
        client.close()
        http.close()
    with pytest.raises(SearchServiceError, match="failed"):
        SearchClient(url, timeout=2).search(["a"])  # the service is gone


def test_load_test_zero_errors_and_identical_results(bm25_engine: Any) -> None:
    engine, corpus = bm25_engine
    queries = [q.question for q in corpus.questions][:12]
    expected = {q: engine.retriever.search([q], k=5)[0] for q in queries}
    service = SearchService(engine.retriever, ServiceOptions(max_batch=16, max_wait_ms=5))
    with service.running() as url:
        report = asyncio.run(
            run_load(url, queries, expected, k=5, clients=6, duration_s=1.5, max_requests=150)
        )
        with SearchClient(url) as client:  # exclusions travel, multi-query requests split correctly
            skip = {expected[queries[0]][0].page_id}
            got = client.search(queries[:2], k=5, exclude=[skip, set()])
            local = [engine.retriever.search([queries[0]], k=5, exclude=[skip])[0], expected[queries[1]]]
            assert got == [[replace(h, image_path="") for h in row] for row in local]  # no served paths
    logger.info("load test: %s", report.summary())
    assert report.requests > 0 and report.errors == 0 and report.mismatches == 0
    assert report.max_score_diff == 0.0  # BM25 is deterministic: JSON round-trips floats exactly
    assert max(service.batches) > 1  # concurrent requests were gathered into batches


def test_async_client_against_colqwen2(
    synth_store: tuple[Path, Any], tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    store, _ = synth_store
    engine = build_index(
        PageStore.open(store).pages()[:5], tmp_path / "col", "colqwen2", tiny_dirs["colqwen2"]
    )
    direct = engine.retriever.search(["a question about a table"], k=3)

    async def go(url: str) -> Any:
        async with AsyncSearchClient(url, timeout=10) as client:
            return await client.search(["a question about a table"], k=3)

    with SearchService(engine.retriever).running() as url:
        got = asyncio.run(go(url))
    assert [h.page_id for h in got[0]] == [h.page_id for h in direct[0]]
    assert [h.score for h in got[0]] == pytest.approx([h.score for h in direct[0]], abs=1e-4)


def test_hits_carry_page_metadata_and_where_filters(bm25_engine: Any, synth_store: tuple[Path, Any]) -> None:
    engine, corpus = bm25_engine
    store, _ = synth_store
    with PageStore.open(store) as opened:
        pages = opened.page_meta()
    files = sorted({m.file for m in pages.values()})
    question = corpus.questions[0].question
    with SearchService(engine.retriever, n_pages=len(engine.index), pages=pages).running() as url:
        client = httpx.Client(timeout=10)
        search = url + "/search"
        rows = client.post(search, json={"queries": [question], "k": 20}).json()["results"][0]
        found = sorted({r["file"] for r in rows})
        assert len(found) >= 2 and set(found) <= set(files) and all(r["cite"] and r["doc_id"] for r in rows)
        body = {"queries": [question], "k": 20, "where": {"file": found[-1]}}
        rows = client.post(search, json=body).json()["results"][0]
        assert rows and {r["file"] for r in rows} == {found[-1]}
        bad = client.post(search, json={"queries": ["a"], "where": {"file": [1]}})
        assert bad.status_code == 400 and '"where" must be' in bad.json()["error"]
        client.close()
    with SearchService(engine.retriever).running() as url:  # no store: no metadata, no filter
        client = httpx.Client(timeout=10)
        response = client.post(url + "/search", json={"queries": ["a"], "where": {"file": "x.pdf"}})
        assert response.status_code == 400 and "needs page metadata" in response.json()["error"]
        client.close()


def test_the_client_filters_with_where_and_rag_over_a_url_sends_it(
    bm25_engine: Any, synth_store: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from evidra.core.errors import InvalidInputError
    from evidra.rag import RAG
    from evidra.retrieval.lifecycle.attach import attach

    engine, corpus = bm25_engine
    store, _ = synth_store
    with PageStore.open(store) as opened:
        pages = opened.page_meta()
    question = corpus.questions[0].question
    with SearchService(engine.retriever, n_pages=len(engine.index), pages=pages).running() as url:
        assert httpx.get(url + "/health").json()["where"] is True
        with SearchClient(url, timeout=10) as client:
            (everything,) = client.search([question], k=20)
            files = sorted({pages[h.page_id].file for h in everything})
            (hits,) = client.search([question], k=20, where=[f"file={files[-1]}"])
            assert (
                hits
                and [h.page_id for h in hits]
                == [h.page_id for h in everything if pages[h.page_id].file == files[-1]][: len(hits)]
            )
            assert {pages[h.page_id].file for h in hits} == {files[-1]}
            assert_hits_close(
                client.search([question], k=20, where={"file": files}), [everything]
            )  # --where's syntax
            with pytest.raises(InvalidInputError, match="is not KEY=VALUE"):
                client.search([question], where=["file"])
            with pytest.raises(InvalidInputError, match="over the search service's caps"):
                client.search([question], where={f"key{i}": "v" for i in range(40)})
        sent: list[dict[str, Any]] = []
        search = SearchClient.search

        def spy(self: SearchClient, *args: Any, **kw: Any) -> Any:
            sent.append(kw)
            return search(self, *args, **kw)

        monkeypatch.setattr(SearchClient, "search", spy)
        with PageStore.open(store) as opened:
            rag = RAG(opened, None, attach([url], opened))  # type: ignore[arg-type]  # retrieve needs no model
            assert rag.retriever is not None and rag.retriever.filters
            got = rag.retrieve(question, k=20, where=[f"file={files[-1]}"])
            rag.retriever.close()
    assert [h.page_id for h in got] == [h.page_id for h in hits]
    assert str(sent[-1]["where"]) == f"file={files[-1]}" and sent[-1]["exclude"] == [()]  # no page list
    with SearchService(engine.retriever).running() as url:  # no metadata: RAG excludes the other pages
        with (
            SearchClient(url, timeout=10) as client,
            pytest.raises(SearchServiceError, match="needs page metadata"),
        ):
            client.search([question], where=[f"file={files[-1]}"])
        with PageStore.open(store) as opened:
            rag = RAG(opened, None, attach([url], opened))  # type: ignore[arg-type]
            assert rag.retriever is not None and not rag.retriever.filters
            assert [h.page_id for h in rag.retrieve(question, k=20, where=[f"file={files[-1]}"])] == [
                h.page_id for h in hits
            ]
            rag.retriever.close()
    assert "where" not in sent[-1] and len(sent[-1]["exclude"][0]) > 0
