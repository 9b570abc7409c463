"""The repository names no document it does not hold (design notes and papers live elsewhere)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = [
    r"BENCHMARKS\.md",
    "UPSTREAM_CODE",
    r"RETRIEVAL\.md",
    "OFFLINE_STACK",
    "RL_FRAMEWORKS",
    "conformance README",
    "/shared/seeds",
    "shared/conformance",
    "reference/[A-Z]",
]
OUTSIDE = re.compile("|".join(NAMES))


def test_no_tracked_file_refers_to_outside_documents() -> None:
    where = ["src", "tests", "docs", "configs", "benchmarks", "README.md"]
    listed = subprocess.run(["git", "ls-files", *where], cwd=ROOT, capture_output=True, text=True, check=True)
    tracked = listed.stdout.split()
    here = Path(__file__).relative_to(ROOT).as_posix()
    hits = []
    for name in tracked:
        path = ROOT / name
        if name == here or path.suffix not in {".py", ".md", ".yaml", ".yml", ".txt", ".toml"}:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits)


def test_license_and_citation_match_the_package() -> None:
    import tomllib
    import yaml

    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in license_text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["license"] == project["license"] == "Apache-2.0"
    assert citation["version"] == project["version"]
    notes = " ".join(ref["notes"] for ref in citation["references"])
    for method in ("lat", "evisrag", "lang2act", "vragrl", "cave"):  # one paper per method
        assert f"method: {method}" in notes or f"methods: {method}" in notes, method
    assert all(ref["title"] and ref["authors"] for ref in citation["references"])
