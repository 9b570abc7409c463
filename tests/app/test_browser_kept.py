"""Kept conversations and whole-line crops in headless Chromium: an answer survives a reload (drawn
again from the store), its crops hold whole lines, the enlarged page's tags sit in its margin
without covering each other, the exported HTML shows its crops with no script, and a deleted
conversation is gone. Screenshots go to $EVIDRA_TEST_ARTIFACTS (default: the test's tmp folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import fill, page_sources
from test_browser import _rect, _wait, browser, shots  # noqa: F401  (the headless Chromium fixtures)

from evidra.app.workspace import Workspace
from evidra.data.synth.documents import SynthCorpus


def _ask(driver: Any, question: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "question").send_keys(question)
    driver.find_element(By.ID, "ask-button").click()
    _wait(driver, lambda d: d.find_element(By.ID, "exports").is_displayed())


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _margin_tags(driver: Any) -> None:
    """The enlarged page's tags: one per box, none over another tag or over a box."""
    from selenium.webdriver.common.by import By

    view = driver.find_element(By.CSS_SELECTOR, "#lb-page .pg")
    tags = [_rect(driver, t) for t in view.find_elements(By.CSS_SELECTOR, ".gut")]
    boxes = [_rect(driver, b) for b in view.find_elements(By.CSS_SELECTOR, ".box")]
    assert len(tags) == len(boxes) >= 2 and not view.find_elements(By.CSS_SELECTOR, ".box b")
    assert not any(_overlap(a, b) for i, a in enumerate(tags) for b in tags[i + 1 :])
    assert not any(_overlap(t, b) for t in tags for b in boxes)


@pytest.mark.slow
def test_a_kept_answer_is_drawn_again_after_a_reload_exported_and_deleted(
    browser: Any,  # noqa: F811
    shots: Path,  # noqa: F811
    serve: tuple[str, Workspace],
    corpus: SynthCorpus,
    oracle: dict[str, Any],
) -> None:
    from selenium.webdriver.common.by import By

    url, _ = serve
    fill(url, corpus)
    oracle["sources"] = page_sources(url)
    question = oracle["question"]
    browser.get(url)
    _ask(browser, question.question)
    steps = len(browser.find_elements(By.CSS_SELECTOR, "#steps > li"))
    kept = browser.current_url
    assert "?c=" in kept and len(browser.find_elements(By.CSS_SELECTOR, "#convs li a")) == 1
    evidence = httpx.get(f"{url}/api/conversations/{kept.split('?c=')[1]}").json()["turns"][0]["evidence"]
    assert all(e["crop"][0] <= e["box"][0] and e["crop"][2] >= e["box"][2] for e in evidence if e["box"])
    browser.execute_script("window.scrollTo(0, document.getElementById('answer').offsetTop - 10)")
    browser.save_screenshot(str(shots / "kept-01-answer.png"))

    browser.find_element(By.CSS_SELECTOR, "#steps .crop").click()
    _wait(browser, lambda d: d.find_element(By.ID, "lightbox").is_displayed())
    _margin_tags(browser)
    browser.save_screenshot(str(shots / "kept-02-enlarged.png"))
    browser.find_element(By.ID, "lb-close").click()

    browser.refresh()  # the page drawn again from the store alone
    _wait(browser, lambda d: d.find_element(By.ID, "final").is_displayed())
    assert browser.find_element(By.ID, "answer-text").text == question.answers[0]
    assert browser.find_element(By.ID, "asked").text == question.question
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps > li")) == steps)
    browser.save_screenshot(str(shots / "kept-03-reloaded.png"))

    export = browser.find_element(By.ID, "export-html").get_attribute("href")
    html = httpx.get(export).text
    file = shots / "kept-export.html"
    file.write_text(html, encoding="utf-8")
    browser.get(file.as_uri())
    images = browser.find_elements(By.TAG_NAME, "img")
    assert len(images) == steps and all(
        browser.execute_script("return arguments[0].naturalWidth", i) > 0 for i in images
    )
    browser.save_screenshot(str(shots / "kept-04-export.png"))

    browser.get(kept)
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#convs .forget"))
    browser.find_element(By.CSS_SELECTOR, "#convs .forget").click()
    _wait(browser, lambda d: "Questions you ask are kept here." in d.find_element(By.ID, "convs").text)
    assert not browser.find_element(By.ID, "answer").is_displayed() and "?c=" not in browser.current_url
    browser.save_screenshot(str(shots / "kept-05-deleted.png"))
    refused = [e["message"] for e in browser.get_log("browser") if "Content Security Policy" in e["message"]]
    assert refused == []
