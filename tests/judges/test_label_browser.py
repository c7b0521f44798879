"""The labelling page in a real browser (Debian's chromium, driven by Playwright): label by keyboard, write a note,
reload, go back and take an answer back, skip, close the tab, kill the server and resume. Every answer acknowledged
is in the gold file whatever ends the session. Skipped without chromium or playwright, except in CI (`CI=true` or
USERTURN_REQUIRE_CHROMIUM=1, set by .ci/run), where that is a failure."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from userturn.core.records import Message, ProbeRecord, record_key
from userturn.judges.gold import GoldLine, read_gold_lines
from userturn.judges.label_session import draw_sample, labeller_order

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--no-first-run", "--disable-dev-shm-usage"]
HOSTILE = ('what about step 2? <img src=x onerror="document.title=\'pwned\'"> </div>'
           '<script>document.title="pwned"</script>')
# the model, perturbation and temperature, and the judge's label as a value (ann never gives it: 6 is not pressed)
SECRETS = ("secret-model", "wrong_answer", "0.7", '"label": "related_new_query"')
TIMEOUT_MS = 15_000


def chromium() -> str:
    """The chromium binary to drive; skip (or fail in CI) without it or without playwright."""
    path = os.environ.get("USERTURN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    missing = [] if Path(path).is_file() else [f"chromium ({path}; Debian: apt-get install chromium)"]
    if importlib.util.find_spec("playwright") is None:
        missing.append("playwright (pip install -e '.[test]')")
    if not missing:
        return path
    message = f"the labelling page's browser test needs {' and '.join(missing)}"
    if os.environ.get("CI") == "true" or os.environ.get("USERTURN_REQUIRE_CHROMIUM") == "1":
        pytest.fail(message)
    pytest.skip(message)


def records() -> list[ProbeRecord]:
    out = []
    for i in range(6):
        turn = HOSTILE if i == 0 else ("Could you explain the second step again? " * 40 if i == 1 else f"and {i}?")
        out.append(ProbeRecord.model_validate({
            "key": record_key("secret-model", "d", str(i), "wrong_answer", 0.7, 0), "status": "ok",
            "model": "secret-model", "dataset": "d", "item_id": str(i), "perturbation": "wrong_answer",
            "temperature": 0.7, "sample": 0, "seed": 1, "label": "related_new_query", "user_turn": turn,
            "messages": [Message(role="user", content=f"Question {i}: what is 17 * 3?"),
                         Message(role="assistant", content="17 * 3 = 41.\n\n" + "Step by step: " * 30)]}))
    return out


class LabelProcess:
    """`userturn label` as a process of its own (so it can be killed like a real session)."""

    def __init__(self, results: Path, out: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "userturn", "label", str(results), "--out", str(out), "--labeller", "ann",
             "--n", "6", "--seed", "1", "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()  # the first line of stdout: the page's address
        assert self.url.startswith("http://127.0.0.1:"), self.proc.stderr.read() if self.proc.stderr else ""

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def browser() -> Iterator[object]:
    path = chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=LAUNCH_ARGS, timeout=TIMEOUT_MS)
        try:
            yield launched
        finally:
            launched.close()


def answers(out: Path) -> list[GoldLine]:
    return read_gold_lines(out) if out.exists() else []


def test_label_by_keyboard_reload_undo_close_kill_and_resume(tmp_path: Path, browser: object) -> None:
    from playwright.sync_api import Browser, Page, Route, expect

    assert isinstance(browser, Browser)
    results, out = tmp_path / "r.jsonl", tmp_path / "gold.jsonl"
    results.write_text("".join(r.model_dump_json() + "\n" for r in records()))
    order = [r.key for r in labeller_order(draw_sample(records(), 6, 1), 1, "ann")]  # what ann sees, in order
    bodies: list[str] = []
    errors: list[str] = []  # the page's console errors (a Content-Security-Policy violation is one)

    def keep_body(route: Route) -> None:
        """Every reply the page gets passes here, so the test sees all it was sent."""
        response = route.fetch()
        bodies.append(response.text())
        route.fulfill(response=response)

    def open_page(url: str) -> Page:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(TIMEOUT_MS)
        page.route("**/*", keep_body)
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(url)
        return page

    def press(page: Page, key: str) -> None:
        """A key that answers: wait for the server's acknowledgement (the answer is on disk by then), then for the
        next record on screen (keys pressed before it are ignored, never applied to a record not yet shown)."""
        with page.expect_response(lambda r: r.url.endswith("/api/answer")):
            page.keyboard.press(key)
        expect(page.locator("body")).to_have_attribute("data-busy", "false")

    server = LabelProcess(results, out)
    try:
        page = open_page(server.url)
        expect(page.locator("#progress")).to_contain_text("0 of 6 answered · record 1 of 6")
        expect(page.locator("#labels button")).to_have_count(8)
        expect(page.locator("#labels")).to_contain_text("reacts to the assistant's actual answer")
        press(page, "1")
        expect(page.locator("#progress")).to_contain_text("1 of 6 answered · record 2 of 6")
        page.keyboard.press("n")
        page.keyboard.type("asks again")
        page.keyboard.press("Escape")
        press(page, "5")
        assert [(a.key, a.label, a.note) for a in answers(out)] == [
            (order[0], "genuine_followup", None), (order[1], "generic", "asks again")]
        page.reload()  # resumes at the first open record
        expect(page.locator("#progress")).to_contain_text("2 of 6 answered · record 3 of 6")
        page.keyboard.press("ArrowLeft")  # back: record 2, its answer shown
        expect(page.locator("#answer")).to_have_text("Your answer: generic")
        expect(page.locator("#note")).to_have_value("asks again")
        press(page, "u")  # take it back
        expect(page.locator("#progress")).to_contain_text("1 of 6 answered · record 2 of 6")
        assert answers(out)[-1].key == order[1] and answers(out)[-1].label is None
        press(page, "s")  # skip it; the next open record is 3
        expect(page.locator("#progress")).to_contain_text("2 of 6 answered · record 3 of 6")
        press(page, "7")
        page.close()  # the tab closed mid-session
        assert [(a.key, a.label, a.skipped) for a in answers(out)][-2:] == [(order[1], None, True),
                                                                            (order[2], "unrelated_query", False)]
        page = open_page(server.url)
        expect(page.locator("#progress")).to_contain_text("3 of 6 answered · record 4 of 6")
        press(page, "2")
        server.kill()  # the server killed mid-session
        assert answers(out)[-1].key == order[3] and answers(out)[-1].label == "restates_query"
        page.close()
    finally:
        server.proc.kill()
        server.proc.wait(timeout=10)

    server = LabelProcess(results, out)  # a rerun resumes where ann stopped
    try:
        page = open_page(server.url)
        expect(page.locator("#progress")).to_contain_text("4 of 6 answered · record 5 of 6")
        for step in ("record 6 of 6", "record 5 of 6"):  # past the last record: the first open one again
            page.keyboard.press("ArrowRight")
            expect(page.locator("#progress")).to_contain_text(step)
        for key in ("8", "3"):
            press(page, key)
        expect(page.locator("#done")).to_be_visible()
        expect(page.locator("#progress")).to_contain_text("6 of 6 answered")
        for i in range(6):  # walk back to the hostile turn and check it is shown as text, never as markup
            page.keyboard.press("ArrowLeft")
            expect(page.locator("body")).to_have_attribute("data-busy", "false")
            if order[5 - i] == records()[0].key:
                break
        expect(page.locator("#user-turn")).to_have_text(HOSTILE)
        assert page.locator("#user-turn img, #user-turn script").count() == 0
        assert page.title() == "userturn label"
        page.screenshot(path=str(tmp_path / "label.png"), full_page=True)
        page.close()
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=10)
    final = {a.key: a.label for a in answers(out)}
    assert final == {order[0]: "genuine_followup", order[1]: None, order[2]: "unrelated_query",
                     order[3]: "restates_query", order[4]: "empty", order[5]: "assistant_continuation"}
    assert errors == []
    seen = "\n".join(bodies)
    assert "Question 0: what is 17 * 3?" in seen
    for secret in (*SECRETS, *order):
        assert secret not in seen, secret
