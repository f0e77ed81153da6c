"""The web console in a real headless Chromium (Debian's, driven by Playwright).

    python console.py BASE_URL KEY_A KEY_B EXAMPLES_DIR SCREENSHOT_DIR

KEY_A's tenant is the user; KEY_B's tenant holds a document and a memory the user must
not see. Exits non-zero (an AssertionError) when the console misbehaves; prints the time
from submitting an ask to its first event painted in the timeline.
"""

import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

BASE, KEY_A, KEY_B, EXAMPLES, SHOTS = sys.argv[1:6]
EXAMPLES, SHOTS = Path(EXAMPLES), Path(SHOTS)
CHROMIUM = os.environ.get("NEURALCORE_TEST_CHROMIUM", "/usr/bin/chromium")
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PROBE = (
    "Probe <script>alert(1)</script> of the console.\n\n"
    'This probe holds <img src=x onerror="alert(2)"> markup that must stay text.\n'
)


def call(method, path, key, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + key)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as res:
        raw = res.read()
        return json.loads(raw) if raw else None


def wait_job(job, key):
    deadline = time.time() + 30
    while job["state"] not in ("indexed", "failed", "cancelled"):
        assert time.time() < deadline, job
        time.sleep(0.1)
        job = call("GET", "/v1/jobs/" + job["id"], key)
    assert job["state"] == "indexed", job
    return job


# The other tenant: a document in a collection of the same name, and a memory.
wait_job(call("POST", "/v1/collections/notes/documents", KEY_B, {"documents": [
    {"name": "secret", "title": "Secret", "text": "The other tenant's secret launch plan."}]}), KEY_B)
DOC_B = call("GET", "/v1/collections/notes/sources", KEY_B)["sources"][0]["documents"][0]
MEM_B = call("POST", "/v1/memories", KEY_B, {"text": "The other tenant's private memory"})["memory"]["id"]
RUN_B = call("POST", "/v1/ask", KEY_B, {"question": "What is the secret launch plan?", "collection": "notes"})["run_id"]
# The user's memories: an old rule superseded by a new one.
OLD = call("POST", "/v1/memories", KEY_A, {"text": "Deploys go through the staging gate", "kind": "rule", "project": "web"})["memory"]["id"]
NEW = call("POST", "/v1/memories", KEY_A, {"text": "Deploys go through the release gate since March", "kind": "rule", "project": "web"})["memory"]["id"]
call("POST", f"/v1/memories/{NEW}/links", KEY_A, {"kind": "SUPERSEDES", "to": OLD})

problems = []  # console errors and page errors: (phase, text)
dialogs = []  # alert/prompt dialogs: an XSS would open one
phase = {"name": "start", "http_errors_expected": False}


def on_console(msg):
    if msg.type != "error":
        return
    # A refused key (401) and another tenant's ids (404) are what some steps test:
    # the browser logs those failed fetches; nothing else may show up.
    if phase["http_errors_expected"] and re.search(r"Failed to load resource: .*status of (401|404)", msg.text):
        return
    problems.append((phase["name"], msg.text))


def on_dialog(d):
    if d.type == "confirm":  # the console's own "delete this source?"
        d.accept()
        return
    dialogs.append((d.type, d.message))
    d.dismiss()


def shot(page, name, full=True):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def step(name, expected=False):
    phase["name"] = name
    phase["http_errors_expected"] = expected
    print("step:", name, flush=True)


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    page = browser.new_page(viewport=LAPTOP)
    page.set_default_timeout(30_000)
    page.on("console", on_console)
    page.on("pageerror", lambda e: problems.append((phase["name"], "pageerror: " + str(e))))
    page.on("dialog", on_dialog)

    step("the page and its headers")
    res = page.goto(BASE + "/")
    h = res.headers
    assert "text/html" in h["content-type"], h
    csp = h["content-security-policy"]
    for d in ["default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
              "img-src 'self' data:", "frame-ancestors 'none'"]:
        assert d in csp, csp
    assert h["x-content-type-options"] == "nosniff", h
    # ACAI's `GET /` is unchanged for API clients.
    with urllib.request.urlopen(BASE + "/") as r:
        assert json.loads(r.read())["status"] == "online"
    expect(page.locator("#signin")).to_be_visible()
    shot(page, "signin", full=False)

    step("a wrong key is refused", expected=True)
    page.fill("#key", "nck_wrong_key")
    page.press("#key", "Enter")
    expect(page.locator("#signin-error")).to_contain_text("not accepted")

    step("sign in")
    page.fill("#key", KEY_A)
    page.click("#signin button[type=submit]")
    expect(page.locator("nav")).to_be_visible()
    expect(page.locator("#ask-form")).to_be_visible()

    step("library: create a collection, upload files, watch the job")
    page.click("nav a[data-page=library]")
    page.fill("#new-collection", "notes")
    page.click("#create-collection button")
    page.wait_for_url(re.compile(r"#/library/notes$"))
    files = [EXAMPLES / "science/tides.md", EXAMPLES / "science/volcanoes.html", EXAMPLES / "science/planets.json",
             EXAMPLES / "notes/rust-ownership.txt", EXAMPLES / "notes/faq.jsonl"]
    page.set_input_files("#upload-input", [str(f) for f in files])
    expect(page.locator(".job")).to_have_attribute("data-done", "indexed")
    expect(page.locator(".job progress")).to_have_attribute("value", str(len(files)))
    expect(page.locator("#sources-table")).to_contain_text("upload:tides.md")

    step("library: drop an XSS probe")
    page.evaluate("""(text) => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], "probe.txt", {type: "text/plain"}));
        document.getElementById("drop").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", PROBE)
    expect(page.locator(".job")).to_have_count(2)
    expect(page.locator(".job").first).to_have_attribute("data-done", "indexed")
    expect(page.locator("#sources-table")).to_contain_text("upload:probe.txt")
    shot(page, "library")
    row = page.locator("#sources-table tr", has_text="upload:probe.txt")
    row.locator("a").first.click()
    expect(page.locator("#chunks")).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("#chunks")).to_contain_text('<img src=x onerror="alert(2)">')
    assert page.locator("#page img, #page script").count() == 0
    expect(page.locator("#doc-facts")).to_contain_text("Characters")
    shot(page, "document")

    step("search: three modes side by side")
    page.click("nav a[data-page=search]")
    page.fill("#search-query", "what causes volcanic eruptions")
    page.select_option("#search-collection", "notes")
    page.click("#search-form button[type=submit]")
    for mode in ["keyword", "vector", "hybrid"]:
        col = page.locator(f".mode[data-mode={mode}]")
        expect(col.locator(".hit").first).to_be_visible()
        expect(col.locator(".score").first).to_have_text(re.compile(r"^\d+\.\d{3}$"))
    shot(page, "search")

    step("ask: the loop live, the answer, a citation's span")
    page.click("nav a[data-page=ask]")
    page.fill("#question", "What causes the tides?")
    page.select_option("#ask-collection", "notes")
    t0 = time.monotonic()
    page.click("#ask-submit")
    page.locator(".timeline li").first.wait_for()
    first_py = (time.monotonic() - t0) * 1000
    run = page.locator(".run").first
    expect(run).to_have_attribute("data-done", "1", timeout=60_000)
    first_page = float(page.locator(".timeline").first.get_attribute("data-first-event-ms"))
    verdicts = run.locator(".timeline .verdict")
    assert verdicts.count() > 0, "no verdicts in the timeline"
    for v in verdicts.all_inner_texts():
        assert v in ("CORRECT", "AMBIGUOUS", "INCORRECT", "VERIFIED", "DROPPED"), v
    kinds = set(run.locator(".timeline li").evaluate_all("els => els.map(e => e.dataset.kind)"))
    for k in ["accepted", "plan", "retrieved", "verdict", "reflection", "stopped", "answer", "report", "done"]:
        assert k in kinds, (k, kinds)
    expect(run.locator(".answer-text")).to_contain_text("Moon")
    run.locator("button.cite").first.click()
    mark = run.locator(".cited mark")
    expect(mark).to_contain_text("gravitational pull of the Moon")
    expect(run.locator(".cited pre")).to_contain_text("# Tides")  # the chunk around the span
    shot(page, "ask")
    page.set_viewport_size(PHONE)
    shot(page, "ask-phone")
    page.set_viewport_size(LAPTOP)

    step("ask: two settings side by side")
    page.click("details summary")
    page.check("input[name=compare]")
    page.click("#ask-submit")
    expect(page.locator(".run[data-done]")).to_have_count(2, timeout=60_000)
    assert page.locator(".run").nth(1).locator("h2").inner_text().find("no-grade") >= 0

    step("memory: search, trust bars, a signal, the audit, relations, tiers")
    page.click("nav a[data-page=memory]")
    page.fill("#memory-query", "deploy gate")
    page.check("#memory-search input[name=include_superseded]")
    page.click("#memory-search button[type=submit]")
    expect(page.locator("#memory-hits meter").first).to_be_visible()
    expect(page.locator("#memory-list .memory")).to_have_count(2)
    page.fill("#tiers-project", "web")
    page.fill("#tiers-query", "deploy")
    page.click("#tiers-form button")
    expect(page.locator("[data-tier=l0] h3")).to_contain_text("tokens")
    page.fill("#graph-entity", "Deploys")
    page.click("#graph-form button")
    expect(page.locator(f"#graph li.memory[data-id='{OLD}']")).to_contain_text("superseded")
    expect(page.locator(f"#graph li.memory[data-id='{NEW}']")).to_be_visible()
    assert "private memory" not in page.locator("#graph").inner_text()
    shot(page, "memory")
    page.locator(f"#memory-list .memory[data-id='{OLD}'] a").click()
    expect(page.locator("#relations tr.superseded")).to_contain_text("this is superseded")
    before = float(page.locator("#memory-trust .trust-value").inner_text())
    page.click("button[data-signal=confirmed]")
    expect(page.locator("#signal-result")).to_contain_text("→")
    after = float(page.locator("#memory-trust .trust-value").inner_text())
    assert after > before, (before, after)
    print(f"memory signal: {page.locator('#signal-result').inner_text()}")
    expect(page.locator("#audit-table tr[data-event=confirmed]")).to_have_count(1)
    shot(page, "memory-detail")

    step("another tenant's ids are not found", expected=True)
    page.goto(f"{BASE}/#/memory/{MEM_B}")
    expect(page.locator("#page .error")).to_contain_text("Not found")
    page.goto(f"{BASE}/#/doc/notes/{DOC_B}")
    expect(page.locator("#page .error")).to_contain_text("Not found")
    assert "secret launch" not in page.locator("#page").inner_text()
    page.goto(f"{BASE}/#/runs/{RUN_B}")
    expect(page.locator("#page .error")).to_contain_text("Not found")
    assert "secret" not in page.locator("#page").inner_text()

    step("runs: the server's list, a stored trace")
    page.click("nav a[data-page=runs]")
    expect(page.locator("#runs-table tbody tr")).to_have_count(3)
    shot(page, "runs")
    # The list is the server's, not the tab's: it stays when the tab forgets its asks.
    page.evaluate("sessionStorage.removeItem('neuralcore.runs')")
    page.reload()
    expect(page.locator("#runs-table tbody tr")).to_have_count(3)
    mine = call("GET", "/v1/runs", KEY_A)["runs"]
    assert [r["question"] for r in mine] == ["What causes the tides?"] * 3, mine
    assert [r["run_id"] for r in call("GET", "/v1/runs", KEY_B)["runs"]] == [RUN_B]
    # The oldest is the full loop's: its answer, verdicts and trace, from the server.
    page.locator("#runs-table tbody tr").last.locator("a").click()
    expect(page.locator("#run-facts")).to_contain_text("What causes the tides?")
    expect(page.locator("#run-answer .answer-text")).to_contain_text("Moon")
    assert page.locator("#run-verdicts tbody tr").count() > 0
    assert page.locator("#run-trace li[data-kind=verdict]").count() > 0
    assert page.locator("#run-trace li[data-kind=reflection]").count() > 0
    page.locator("#run-answer button.cite").first.click()
    expect(page.locator("#page .cited mark")).to_contain_text("gravitational pull of the Moon")
    # The user marks the answer: its cited passages become the tenant's training pairs.
    page.locator("#run-mark button[data-verdict=good]").click()
    expect(page.locator("#mark-result")).to_contain_text("Marked good")
    marks = call("GET", "/v1/marks", KEY_A)["marks"]
    assert len(marks) == 1 and marks[0]["verdict"] == "good", marks
    pairs = call("GET", "/v1/feedback", KEY_A)["pairs"]
    assert any(p["source"].startswith("feedback:answer:") and p["label"] == 1.0 for p in pairs), pairs
    assert call("GET", "/v1/marks", KEY_B)["marks"] == []

    step("library: delete the probe's source")
    page.goto(f"{BASE}/#/library/notes")
    page.locator("#sources-table tr", has_text="upload:probe.txt").get_by_role("button").click()
    expect(page.locator("#sources-table")).not_to_contain_text("upload:probe.txt")

    step("keyboard: the nav is reachable and focus is visible")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement && document.activeElement.tagName")
    assert focused in ("A", "BUTTON", "INPUT"), focused

    browser.close()

assert not dialogs, f"a dialog opened (markup ran): {dialogs}"
assert not problems, f"console errors: {problems}"
print(f"first event painted: {first_page:.1f} ms after submit (page clock); {first_py:.1f} ms (Python, incl. CDP round trip)")
print("console: ok")
