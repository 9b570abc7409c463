"""``evidra serve`` in headless Chromium (Selenium with Debian's chromium and chromium-driver):
upload a PDF and a broken file, follow a long upload's progress and cancel it, ask, see the cited
boxes drawn, enlarge a page, search, page through a document; the content security policy blocks
nothing the app does. Screenshots go to $EVIDRA_TEST_ARTIFACTS (default: the test's tmp folder)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from app_server_helpers import page_sources
from PIL import Image

from evidra.app.workspace import Workspace
from evidra.data.synth.documents import SynthCorpus

CHROMIUM, DRIVER = (
    shutil.which("chromium") or "/usr/bin/chromium",
    shutil.which("chromedriver") or "/usr/bin/chromedriver",
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
    "--force-device-scale-factor=1",
]
WAIT_S = 60


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.skip("chromium and chromium-driver (Debian packages) are not installed")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # to read policy violations
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_window_size(1280, 1000)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("EVIDRA_TEST_ARTIFACTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {folder}")
    return folder


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(condition)


def _rect(driver: Any, element: Any) -> dict[str, float]:
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height};",
        element,
    )


@pytest.mark.slow
def test_upload_ask_see_the_boxes_enlarge_search_and_page_through(
    browser: Any,
    shots: Path,
    serve: tuple[str, Workspace],
    corpus: SynthCorpus,
    oracle: dict[str, Any],
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By

    url, _ = serve
    driver = browser
    driver.get(url)
    assert driver.find_element(By.ID, "doc-count").text == "0"
    driver.save_screenshot(str(shots / "01-empty.png"))

    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7 this file was cut short")
    pdf = corpus.docs_dir / oracle["question"].source
    pdfs = sorted(corpus.docs_dir.glob("*.pdf"))
    driver.find_element(By.ID, "files").send_keys("\n".join(map(str, [*pdfs, broken])))
    _wait(driver, lambda d: d.find_element(By.ID, "progress-text").text.startswith("Done"))
    log = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#upload-log li")]
    assert any(line.startswith(f"{pdf.name}: ") and "pages added" in line for line in log), log
    assert any(line.startswith("broken.pdf ") and "not a readable PDF" in line for line in log), log
    assert "1 file not read" in driver.find_element(By.ID, "progress-text").text
    assert driver.find_element(By.ID, "doc-count").text == str(len(pdfs))
    driver.save_screenshot(str(shots / "02-uploaded.png"))
    _upload_and_cancel(driver, shots, tmp_path / "long.pdf")
    assert driver.find_element(By.ID, "doc-count").text == str(len(pdfs))

    oracle["sources"] = page_sources(url)
    question = oracle["question"]
    driver.find_element(By.ID, "question").send_keys(question.question)
    driver.find_element(By.ID, "ask-button").click()
    _wait(driver, lambda d: d.find_element(By.ID, "final").is_displayed())
    assert driver.find_element(By.ID, "answer-text").text == question.answers[0]
    assert driver.find_element(By.ID, "raw").text == oracle["texts"][-1].strip()
    assert "first token after" in driver.find_element(By.ID, "timing").text
    steps = driver.find_elements(By.CSS_SELECTOR, "#steps > li")
    # the cited steps (a second one when another question's evidence is on a retrieved page) and
    # the answer's own box: one card per box the oracle's text cites
    cited = oracle["texts"][-1].count("Bounding box")
    assert len(steps) == cited >= 2
    assert f"{Path(question.source).name} p. {question.page_number}" in steps[0].text
    crops = driver.find_elements(By.CSS_SELECTOR, "#steps .crop")
    assert len(crops) == cited and all(c.find_elements(By.CSS_SELECTOR, ".box") for c in crops)
    crop_box = crops[0].find_element(By.CSS_SELECTOR, ".box")
    crop_width = _rect(driver, crop_box)["w"]
    ev = question.evidence_box
    assert ev is not None
    assert crop_width >= 0.6 * (ev.x2 - ev.x1)  # the cited region is drawn near its own size: readable
    _check_box_on_page(driver, steps[0], ev.as_tuple(), question_page_size(serve[1], oracle))
    driver.execute_script("window.scrollTo(0, document.getElementById('answer').offsetTop - 10)")
    driver.save_screenshot(str(shots / "03-answer.png"))

    crops[0].click()
    lightbox = driver.find_element(By.ID, "lightbox")
    _wait(driver, lambda d: lightbox.is_displayed())
    page_view = lightbox.find_element(By.CSS_SELECTOR, ".pg")
    assert (
        len(page_view.find_elements(By.CSS_SELECTOR, ".box")) == 2
    )  # the evidence and the answer on this page
    _wait(driver, lambda d: d.execute_script("return arguments[0].querySelector('img').complete", page_view))
    assert _rect(driver, page_view)["h"] >= 700  # the whole page, enlarged to the window's height
    driver.save_screenshot(str(shots / "04-enlarged.png"))
    _assert_drawn(shots / "04-enlarged.png")
    driver.find_element(By.ID, "lb-close").click()
    assert not lightbox.is_displayed()

    follow = driver.find_element(By.ID, "follow-question")  # a follow-up carries the conversation
    follow.send_keys("And on which page is that?")
    driver.find_element(By.ID, "follow-button").click()
    assert not driver.find_element(By.ID, "follow").is_displayed()  # hidden while the answer streams
    _wait(driver, lambda d: d.find_element(By.ID, "follow").is_displayed())
    assert driver.find_element(By.ID, "asked").text == "And on which page is that?"
    turns = driver.find_elements(By.CSS_SELECTOR, "#turns li")
    assert [t.get_attribute("class") for t in turns] == ["user", "assistant"]
    assert turns[0].text == question.question and turns[1].text.startswith(question.answers[0])
    chat = oracle["chats"][-1]
    assert [m.role for m in chat] == ["user", "assistant", "user"] and chat[0].plain_text == question.question
    assert "And on which page is that?" in chat[2].plain_text
    driver.save_screenshot(str(shots / "04b-follow-up.png"))

    box = driver.find_element(By.ID, "question")
    box.clear()
    box.send_keys("project budget")
    driver.find_element(By.ID, "search-button").click()
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits .card"))
    cards = driver.find_elements(By.CSS_SELECTOR, "#hits .card")
    title = driver.find_element(By.ID, "results-title").text
    assert title.startswith(f"{len(cards)} page") and "for “project budget”" in title
    assert all(card.find_elements(By.CSS_SELECTOR, ".crop .box") for card in cards)  # where each matched
    driver.save_screenshot(str(shots / "05-search.png"))

    driver.find_element(By.CSS_SELECTOR, "#docs a").click()
    _wait(driver, lambda d: d.find_elements(By.ID, "where"))
    pages = len(driver.find_elements(By.CSS_SELECTOR, ".strip li"))
    assert driver.find_element(By.ID, "where").text == f"page 1 of {pages}"
    driver.find_element(By.ID, "next").click()
    _wait(driver, lambda d: d.find_element(By.ID, "where").text == f"page 2 of {pages}")
    _wait(driver, lambda d: d.execute_script("return document.querySelector('.sheet img').naturalWidth") > 0)
    driver.save_screenshot(str(shots / "06-document.png"))
    driver.find_element(By.TAG_NAME, "body").send_keys("\ue012")  # the left arrow key: back a page
    _wait(driver, lambda d: d.find_element(By.ID, "where").text == f"page 1 of {pages}")
    refused = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
    assert refused == []  # the policy blocked nothing the app itself does


def _upload_and_cancel(driver: Any, shots: Path, long_pdf: Path) -> None:
    """A long PDF shows how many pages are read; Cancel stops it and adds nothing."""
    from selenium.webdriver.common.by import By

    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    pages = []
    for n in range(400):
        canvas = PdfCanvas(612, 792)
        canvas.text(72, 96, f"Page {n + 1} of a long report", 12)
        pages.append(canvas)
    long_pdf.write_bytes(write_pdf(pages))
    driver.find_element(By.ID, "files").send_keys(str(long_pdf))
    text = driver.find_element(By.ID, "progress-text")
    _wait(driver, lambda d: re.search(r"long\.pdf: \d+ pages? read", text.text))
    cancel = driver.find_element(By.ID, "cancel-upload")
    assert cancel.is_displayed()
    driver.save_screenshot(str(shots / "02b-reading.png"))
    cancel.click()
    _wait(driver, lambda d: text.text.startswith("Cancelled"))
    log = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#upload-log li")]
    assert log == ["long.pdf: cancelled, nothing added"], log
    assert text.text == "Cancelled: 0 pages added, 0 indexed, 1 file cancelled."
    assert not cancel.is_displayed()
    driver.save_screenshot(str(shots / "02c-cancelled.png"))


def question_page_size(workspace: Workspace, oracle: dict[str, Any]) -> tuple[int, int]:
    from evidra.corpus import PageStore

    question = oracle["question"]
    page_id = next(
        pid for pid, where in oracle["sources"].items() if where == (question.source, question.page_number)
    )
    with PageStore.open(workspace.store_root) as store:
        page = store.get(page_id)
    return page.width, page.height


def _check_box_on_page(driver: Any, step: Any, box: tuple[float, ...], size: tuple[int, int]) -> None:
    """The box drawn on the step's page thumbnail sits where the cited box is on the page (2%)."""
    from selenium.webdriver.common.by import By

    view = step.find_element(By.CSS_SELECTOR, ":scope > .pg")
    drawn = _rect(driver, view.find_elements(By.CSS_SELECTOR, ".box")[0])
    page = _rect(driver, view)
    width, height = size
    assert abs((drawn["x"] - page["x"]) / page["w"] - box[0] / width) < 0.02
    assert abs((drawn["y"] - page["y"]) / page["h"] - box[1] / height) < 0.02
    assert abs(drawn["w"] / page["w"] - (box[2] - box[0]) / width) < 0.02


def _assert_drawn(shot: Path) -> None:
    """The screenshot shows a step's box colour (blue #2563eb) and the answer's (green #16a34a)."""
    with Image.open(shot) as im:
        colours = {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 22) or []}
    assert any(abs(r - 0x25) < 12 and abs(g - 0x63) < 12 and abs(b - 0xEB) < 12 for r, g, b in colours)
    assert any(abs(r - 0x16) < 12 and abs(g - 0xA3) < 12 and abs(b - 0x4A) < 12 for r, g, b in colours)
