"""BM25 on the bm25s engine: hand-computed scores, add/delete, ties, exclusions, the folder format."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.retrieval.encoders._bm25_files import MANIFEST
from evidra.retrieval.encoders._bm25_text import tokenize
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from float_hits import assert_hits_close


def test_bm25_hand_computed() -> None:
    texts = {"a": "the red fox", "b": "a blue whale", "c": "red red whale", "d": "fox"}
    bm25 = BM25Retriever.build(texts, BM25Params(k1=1.5, b=0.75, language="none"))  # plain tokens
    # N=4, avgdl=2.5; df(red)=df(whale)=df(fox)=2 -> idf = ln(1 + 2.5/2.5) = ln 2
    # |d|=3: k1*(1-b+b*3/2.5) = 1.725; |d|=1: 0.825
    # c: ln2*(2*2.5/(2+1.725) + 2.5/(1+1.725)) = 1.566314; a, b: ln2*2.5/2.725 = 0.635915
    scores = bm25.scores("red whale red")  # repeated query terms count once
    assert scores.tolist() == pytest.approx([0.635915, 0.635915, 1.566314, 0.0], abs=1e-6)
    # fox: d is shorter, so it wins: ln2*2.5/1.825 = 0.949517
    hits = bm25.search(["Fox!"], k=3)[0]
    assert [(h.page_id, round(h.score, 6)) for h in hits] == [("d", 0.949517), ("a", 0.635915)]
    assert [h.page_id for h in bm25.search(["fox"], k=2, exclude=[{"d"}])[0]] == ["a"]


def test_bm25_three_documents_by_hand() -> None:
    bm25 = BM25Retriever.build({"a": "cat sat mat", "b": "cat cat dog", "c": "dog"})
    # N=3, avgdl=7/3. idf(cat)=idf(dog)=ln(1 + 1.5/2.5)=ln 1.6=0.470004; idf(sat)=ln(1 + 2.5/1.5)=0.980829
    # norm: |d|=3 -> 1.5*(0.25 + 0.75*9/7) = 1.821429; |d|=1 -> 1.5*(0.25 + 0.75*3/7) = 0.857143
    # a: 0.470004*2.5/2.821429 = 0.416459
    # b: 0.470004*(2*2.5/3.821429) + 0.416459 = 0.614958 + 0.416459 = 1.031417
    # c: 0.470004*2.5/1.857143 = 0.632697
    assert bm25.scores("cat dog").tolist() == pytest.approx([0.416459, 1.031417, 0.632697], abs=1e-6)
    # sat: only a, 0.980829*2.5/2.821429 = 0.869089
    assert [(h.page_id, round(h.score, 6)) for h in bm25.search(["SAT"], k=5)[0]] == [("a", 0.869089)]
    assert bm25.search(["zebra"], k=5) == [[]]  # no shared term: no hit at all


def _reference(texts: dict[str, str], query: str, k1: float = 1.5, b: float = 0.75) -> list[float]:
    """The Okapi BM25 formula of the module docstring, term by term in plain Python."""
    docs = [Counter(tokenize(t)) for t in texts.values()]
    n, avgdl = len(docs), sum(sum(d.values()) for d in docs) / len(docs)
    out = []
    for d in docs:
        score = 0.0
        for term in set(tokenize(query)):
            df = sum(term in e for e in docs)
            if d[term]:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * d[term] * (k1 + 1) / (d[term] + k1 * (1 - b + b * sum(d.values()) / avgdl))
        out.append(score)
    return out


def _corpus(n: int, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(60)]
    weights = [1 / (r + 1) for r in range(60)]  # Zipf-like: w0 is common, w59 rare
    return {f"p{i}": " ".join(rng.choices(words, weights, k=rng.randint(1, 40))) for i in range(n)}


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0), (1.2, 0.0)])
def test_scores_match_the_formula_on_a_random_corpus(k1: float, b: float) -> None:
    texts = _corpus(80, seed=int(k1 * 10 + b * 100))
    bm25 = BM25Retriever.build(texts, BM25Params(k1, b))
    for query in ["w0 w5", "w3 w3 w41", "w59", "w1 w2 w7 w30 w58"]:
        want = _reference(texts, query, k1, b)
        assert bm25.scores(query).tolist() == pytest.approx(want, rel=2e-6, abs=1e-6)
        ranked = sorted((i for i, s in enumerate(want) if s > 0), key=lambda i: (-want[i], i))[:10]
        got = [h.page_id for h in bm25.search([query], k=10)[0]]
        assert got[:5] == [f"p{i}" for i in ranked][:5]  # float32 may swap near-equal scores further down


def test_add_and_delete_match_a_fresh_build() -> None:
    texts = _corpus(30, seed=1)
    first, rest = dict(list(texts.items())[:20]), dict(list(texts.items())[20:])
    bm25 = BM25Retriever.build(first)
    bm25.add(rest)
    bm25.add({"extra": "w0 zebra"})
    assert bm25.delete(["extra", "not-there"]) == 1
    fresh = BM25Retriever.build(texts)
    for query in ["w0 w5", "w2 w9 w17"]:
        np.testing.assert_allclose(bm25.scores(query), fresh.scores(query), rtol=1e-6)
    assert bm25.search(["zebra"], k=3) == [[]]  # the deleted page's only word is gone with it
    with pytest.raises(InvalidInputError, match="already in the BM25 index"):
        bm25.add({"p3": "zebra"})
    bm25.add({"p3": "zebra"}, images={"p3": "/img/z.png"}, replace=True)
    (hit,) = bm25.search(["zebra"], k=3)[0]
    assert (hit.page_id, hit.image_path, len(bm25)) == ("p3", "/img/z.png", 30)
    assert bm25.delete(list(texts)) == 30 and len(bm25) == 0 and bm25.search(["w0"], k=2) == [[]]


def test_ties_keep_insertion_order_and_exclusions_apply_per_query() -> None:
    bm25 = BM25Retriever.build({"z": "red", "y": "red", "x": "red", "w": "blue"})
    assert [h.page_id for h in bm25.search(["red"], k=2)[0]] == ["z", "y"]  # equal scores: first added first
    got = bm25.search(["red", "red blue"], k=3, exclude=[{"z", "nope"}, {"w"}])
    assert [[h.page_id for h in hits] for hits in got] == [["y", "x"], ["z", "y", "x"]]
    with pytest.raises(InvalidInputError, match="exclude must hold one collection"):
        bm25.search(["red"], k=1, exclude=[{"z"}, {"y"}])
    with pytest.raises(InvalidInputError, match="k must be a positive integer"):
        bm25.search(["red"], k=0)


def test_an_index_without_any_token_finds_nothing(tmp_path: Path) -> None:
    for texts in ({}, {"a": "", "b": "  ,;  "}):
        bm25 = BM25Retriever.build(texts)
        assert bm25.search(["anything"], k=3) == [[]]
        bm25.save(tmp_path / str(len(texts)))
        assert len(BM25Retriever.load(tmp_path / str(len(texts)))) == len(texts)


def test_bm25_save_load_roundtrip(tmp_path: Path) -> None:
    bm25 = BM25Retriever.build({"x": "alpha beta", "y": "beta gamma"}, images={"x": "x.png"})
    bm25.save(tmp_path)
    again = BM25Retriever.load(tmp_path)
    assert_hits_close(again.search(["alpha beta", "gamma"], k=2), bm25.search(["alpha beta", "gamma"], k=2))
    assert again.search(["alpha"], k=1)[0][0].image_path == str(Path("x.png").absolute())  # as given: cwd
    again.add({"z": "gamma delta"})
    again.save(tmp_path)  # a second save replaces the first version folder
    assert len(list(tmp_path.glob("bm25-*"))) == 1
    assert [h.page_id for h in BM25Retriever.load(tmp_path).search(["delta"], k=2)[0]] == ["z"]
    assert tokenize("Ünïcode Wörds, 42") == ["ünïcode", "wörds", "42"]
    # ligature characters (as OCR emits them) and decomposed accents match their plain spelling
    assert tokenize("\ufb01ne \ufb02oor e\ufb03cient Wo\u0308rds") == ["fine", "floor", "efficient", "wörds"]
    bm25 = BM25Retriever.build({"ocr": "the speci\ufb01cation of the \ufb02oor", "other": "a fine day"})
    assert [h.page_id for h in bm25.search(["specification floor"], k=2)[0]] == ["ocr"]
    with pytest.raises(InvalidInputError, match="k1"):
        BM25Params(k1=-1.0)


def test_the_index_folder_can_be_moved(tmp_path: Path) -> None:
    root = tmp_path / "project"
    images = {"a": str(root / "store" / "a.png"), "b": ""}
    BM25Retriever.build({"a": "orion budget", "b": "vega budget"}, images=images).save(root / "idx")
    for file in (root / "idx").rglob("*"):
        if file.is_file():
            assert str(tmp_path).encode() not in file.read_bytes(), file  # no absolute path recorded
    shutil.move(root, tmp_path / "moved")
    hits = BM25Retriever.load(tmp_path / "moved" / "idx").search(["budget orion"], k=2)[0]
    assert [(h.page_id, h.image_path) for h in hits] == [
        ("a", str(tmp_path / "moved" / "store" / "a.png")),
        ("b", ""),
    ]


def test_a_failed_save_keeps_the_previous_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bm25 = BM25Retriever.build({"a": "orion", "b": "vega"})
    bm25.save(tmp_path)
    bm25.add({"c": "lyra"})
    engine = type(bm25._engine)

    def full_disk(self: object, *args: object, **kwargs: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(engine, "save", full_disk)
    with pytest.raises(OSError, match="no space"):
        bm25.save(tmp_path)
    again = BM25Retriever.load(tmp_path)
    assert again.page_ids() == ["a", "b"] and len(list(tmp_path.glob("bm25-*"))) == 1


def test_an_index_of_the_old_format_asks_for_a_rebuild(tmp_path: Path) -> None:
    old = {"k1": 1.5, "b": 0.75, "ids": ["a"], "images": ["/x/a.png"], "docs": [{"orion": 1}]}
    (tmp_path / "bm25.json").write_text(json.dumps(old))
    with pytest.raises(
        CorpusError, match=r"older evidra \(bm25\.json\).*evidra index build --out .* --encoder bm25"
    ):
        BM25Retriever.load(tmp_path)
    with pytest.raises(CorpusError, match=f"there is no {MANIFEST}"):
        BM25Retriever.load(tmp_path / "missing")


@pytest.mark.parametrize(
    "damage",
    [
        "manifest_escape",
        "manifest_truncated",
        "pages_mismatch",
        "counts_garbage",
        "counts_out_of_range",
        "scores_truncated",
        "engine_params",
    ],
)
def test_damaged_files_give_one_line_errors(tmp_path: Path, damage: str) -> None:
    BM25Retriever.build({"a": "orion budget", "b": "vega"}).save(tmp_path)
    folder = next(tmp_path.glob("bm25-*"))
    if damage == "manifest_escape":
        (tmp_path / MANIFEST).write_text(json.dumps({"format": 1, "folder": "../elsewhere"}))
    elif damage == "manifest_truncated":
        (tmp_path / MANIFEST).write_text('{"format": 1, "fol')
    elif damage == "pages_mismatch":
        pages = json.loads((folder / "pages.json").read_text())
        (folder / "pages.json").write_text(json.dumps({**pages, "images": [""]}))
    elif damage == "counts_garbage":
        (folder / "counts.npz").write_bytes(b"not a zip file")
    elif damage == "counts_out_of_range":
        np.savez(
            folder / "counts.npz",
            indptr=np.array([0, 1, 2]),
            terms=np.array([0, 99]),
            counts=np.array([1, 1]),
        )
    elif damage == "scores_truncated":
        np.save(folder / "indices.csc.index.npy", np.array([5, 0, 1], dtype=np.int32))
    else:
        params = json.loads((folder / "params.index.json").read_text())
        (folder / "params.index.json").write_text(json.dumps({**params, "k1": 0.1}))
    with pytest.raises(
        CorpusError, match=r"cannot read the BM25 index .*build it again.*--encoder bm25"
    ) as info:
        BM25Retriever.load(tmp_path)
    assert "\n" not in str(info.value)


def test_importing_evidra_does_not_import_bm25s() -> None:
    code = (
        "import sys, evidra, evidra.retrieval.encoders.bm25 as m; before = 'bm25s' in sys.modules; "
        "m.BM25Retriever.build({'a': 'x'}); print(before, 'bm25s' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split() == ["False", "True"]
