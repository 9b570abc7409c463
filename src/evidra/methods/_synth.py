"""Synthetic training samples for the method recipes: rendered PDFs with gold boxes and text.

``generate_documents`` writes PDFs whose questions carry gold answer boxes, evidence boxes and
evidence text; ingesting them into a page store gives pages with a text layer (the offline LAT
similarity reads it). Everything lives under ``DataConfig.path`` (a cache folder) or, when it is
empty, under a per-seed folder of the user's private cache (``private_cache_dir``); a second
call reuses the store.
"""

from __future__ import annotations

import logging
from pathlib import Path

from evidra.core.types import Sample
from evidra.rl.run_config import DataConfig
from evidra.safeio.cache import private_cache_dir as _private_cache_dir

logger = logging.getLogger(__name__)

SYNTH_DPI = 72.0  # small pages keep rollouts cheap; boxes scale with the DPI, so rewards do not change
QUESTIONS_PER_DOC = 4  # about: up to 3 pages x 2 questions + 1 unanswerable; used to size the corpus


def private_cache_dir() -> Path:
    """evidra's private cache (``evidra.safeio.cache.private_cache_dir``); its error points at data.path."""
    return _private_cache_dir("or set data.path to a folder of your own")


def cache_dir(cfg: DataConfig) -> Path:
    base = Path(cfg.path).expanduser() if cfg.path else private_cache_dir() / "synth"
    n_docs = max(1, -(-cfg.size // QUESTIONS_PER_DOC))
    return base / f"seed{cfg.seed}-docs{n_docs}-dpi{int(SYNTH_DPI)}"


def synth_samples(cfg: DataConfig, dataset: str) -> list[Sample]:
    """``cfg.size`` samples (cycled when the corpus has fewer questions), pages with words."""
    from evidra.corpus import PageStore, ingest
    from evidra.data.synth.documents import generate_documents

    root = cache_dir(cfg)
    n_docs = max(1, -(-cfg.size // QUESTIONS_PER_DOC))
    corpus = generate_documents(root / "corpus", n_docs=n_docs, seed=cfg.seed, dpi=SYNTH_DPI)
    store_dir = root / "store"
    store = PageStore.create(store_dir)
    try:
        known = {p.id for p in store.pages(with_words=False)}
        wanted = {pid for doc in corpus.documents for pid in doc.page_ids}
        if not wanted <= known:
            logger.info("ingesting %d synthetic documents into %s", n_docs, store_dir)
            ingest(corpus.docs_dir, store, dpi=SYNTH_DPI)
        pages = {p.id: p for p in store.pages()}
    finally:
        store.close()
    samples = list(corpus.samples(pages, dataset=dataset))
    return [samples[i % len(samples)] for i in range(cfg.size)] if cfg.size > 0 else []
