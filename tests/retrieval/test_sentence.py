from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evidra.core.types import Box, Page, Word
from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.interfaces import EncodedRetriever, EncoderOptions


@pytest.fixture(scope="module")
def tiny_sentence_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer BERT with mean pooling, built offline."""
    st = pytest.importorskip("sentence_transformers")
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    root = tmp_path_factory.mktemp("minilm")
    corpus = root / "corpus.txt"
    corpus.write_text("the red fox jumps over the lazy dog\nrevenue grew in 2019\nblue whale table chart\n")
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train([str(corpus)], vocab_size=200, min_frequency=1)
    (root / "bert").mkdir()
    wordpiece.save_model(str(root / "bert"))
    BertTokenizerFast(vocab_file=str(root / "bert" / "vocab.txt")).save_pretrained(root / "bert")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=wordpiece.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(root / "bert")
    # a plain transformers directory loads as Transformer + mean Pooling
    st.SentenceTransformer(str(root / "bert"), device="cpu", local_files_only=True).save(str(root / "st"))
    return root / "st"


def _page(tmp_path: Path, pid: str, text: str) -> Page:
    words = tuple(Word(w, Box(0, 0, 1, 1)) for w in text.split())
    return Page(pid, str(tmp_path / f"{pid}.png"), 10, 10, words=words)


def test_sentence_encoder_embeds_text_layer(tiny_sentence_model: Path, tmp_path: Path) -> None:
    from evidra.retrieval.encoders import load_encoder

    enc = load_encoder("minilm", tiny_sentence_model, EncoderOptions(batch_size=2))
    assert enc.kind == "single"
    texts = {"a": "the red fox jumps", "b": "revenue grew in 2019", "c": "blue whale chart"}
    pages = [_page(tmp_path, pid, t) for pid, t in texts.items()]
    emb = enc.embed_pages(pages)
    assert [tuple(e.shape) for e in emb] == [(1, 32)] * 3
    torch.testing.assert_close(torch.cat(emb).norm(dim=-1), torch.ones(3))
    # a query with exactly a page's text embeds to that page's vector, so it ranks first
    torch.testing.assert_close(enc.embed_queries(["revenue grew in 2019"])[0], emb[1], atol=1e-5, rtol=0)
    index = DenseIndex.create(tmp_path / "idx", 32, device="cpu")
    index.add(list(texts), emb)
    hits = EncodedRetriever(enc, index).search(["revenue grew in 2019"], k=3)[0]
    scores = {h.page_id: h.score for h in hits}
    # a random tiny BERT maps all texts close together, so compare within fp16 storage precision
    assert scores["b"] == pytest.approx(1.0, abs=2e-3) and scores["b"] >= max(scores.values()) - 2e-3
