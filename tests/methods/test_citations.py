"""Each paper method names the paper to cite, with the facts CITATION.cff lists for it."""

from __future__ import annotations

from pathlib import Path

import yaml

from evidra.methods import METHODS

CFF = Path(__file__).resolve().parents[2] / "CITATION.cff"
PAPERS = {"lat", "evisrag", "lang2act", "vragrl", "cave", "unidoc"}


def test_every_paper_method_cites_its_paper_as_citation_cff_does() -> None:
    references = yaml.safe_load(CFF.read_text())["references"]
    by_title = {" ".join(r["title"].split()): r for r in references}
    assert set(METHODS.names()) >= PAPERS
    for name in sorted(PAPERS):
        paper = METHODS.get(name).citation
        assert paper is not None, name
        ref = by_title.get(paper.title)
        assert ref is not None, f"{name}: {paper.title!r} is not a title of CITATION.cff"
        assert f"evidra method{'s' if name == 'lang2act' else ''}: {name}" in ref["notes"]
        family = ref["authors"][0].get("family-names")
        assert paper.authors == (f"{family} et al." if family else ""), name
        urls = {i["value"] for i in ref.get("identifiers", []) if i["type"] == "url"}
        assert paper.url == next(iter(urls), "") and paper.code == ref.get("repository-code", ""), name
        assert paper.year == ref.get("year"), name
