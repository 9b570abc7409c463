"""Synthetic data: rendered documents with known answers and gold boxes.

See ``evidra.data.synth.documents`` for the generator used by the demo and the tests.
"""

from __future__ import annotations

from evidra.data.synth.documents import (
    NO_ANSWER,
    SynthCorpus,
    SynthDocument,
    SynthQuestion,
    generate_documents,
    generate_image_documents,
)

__all__ = [
    "NO_ANSWER",
    "SynthCorpus",
    "SynthDocument",
    "SynthQuestion",
    "generate_documents",
    "generate_image_documents",
]
