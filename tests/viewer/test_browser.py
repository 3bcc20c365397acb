"""The viewer as a person uses it: Debian's Chromium, headless, opens the page, picks a task,
a split and a seed, and what it shows is checked against the batch the Sampler builds for
that seed. Chromium is a required part of the test environment (.ci/run installs it): its
absence fails these tests, it never skips them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import dlkit
from tests.cli.helpers import run_dlkit

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is not installed (apt-get install chromium; .ci/run does)"
    return path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _batch_of(db, task, split, anchor, s, r, w, policy="uniform", examples=0,
              example_policy="recent"):
    with dlkit.Sampler(db, batch_size=4, sequence_length=s, max_rows=r, bfs_child_width=w,
                       bfs_child_policy=policy, context_examples=examples,
                       context_example_policy=example_policy, num_prefetch=0) as sampler:
        for batch in sampler.iter_eval(split, task):
            hit = np.flatnonzero((batch["anchor_rows"] == anchor) & (batch["sequence_mask"] == 1))
            if hit.size:
                return batch, int(hit[0])
    raise AssertionError(f"anchor {anchor} not in {task}/{split}")


def _expected_pairs(batch, b):
    """Same-row, foreign-key and same-column cell pairs, from the batch's own arrays."""
    real = np.flatnonzero(batch["is_padding"][b] == 0)
    rows = batch["seq_row_ids"][b, real].astype(int)
    cols = batch["column_ids"][b, real].astype(int)
    adj = batch["fk_adj"][b].astype(bool)
    linked = adj | adj.T
    same_row = rows[:, None] == rows[None, :]
    fk = ~same_row & linked[rows[:, None], rows[None, :]]
    same_col = ~same_row & ~fk & (cols[:, None] == cols[None, :])
    return int(same_row.sum()), int(fk.sum()), int(same_col.sum())


def _check_page_against_batch(page, db, task, split, s, r, w, policy="uniform", examples=0,
                              example_policy="recent"):
    page.wait_for_selector("body[data-ready=yes]")
    anchor = int(page.input_value("[data-testid=seed]"))
    batch, b = _batch_of(db, task, split, anchor, s, r, w, policy, examples, example_policy)
    real = int((batch["is_padding"][b] == 0).sum())
    assert f" {real} of {s} cells" in page.inner_text("[data-testid=fill]")
    shown = page.eval_on_selector_all(
        "#cells td[data-position]",
        "tds => tds.map(td => [+td.dataset.position, td.className, td.textContent])")
    assert [p for p, _, _ in shown] == list(range(real))
    for p, css, text in shown:
        assert (css == "target") == bool(batch["is_target"][b, p])
        assert (css == "hidden") == bool(batch["is_hidden"][b, p] and not batch["is_target"][b, p])
        if batch["is_target"][b, p]:
            assert text == "[MASKED]"
    # the rows marked as context examples are those whose cells the batch flags
    marked = page.eval_on_selector_all(
        "#cells table[data-row]", "ts => ts.filter(t => t.querySelector('th').textContent"
        ".endsWith('(example)') && t.querySelector('td[data-position]')).map(t => +t.dataset.row)")
    flags = batch["is_context_example"][b, :real] == 1
    assert marked == sorted(set(batch["seq_row_ids"][b, :real][flags].tolist()))
    tree_rows = page.eval_on_selector_all("#tree li[data-row]", "ls => ls.length")
    assert tree_rows == int(batch["seq_row_ids"][b, :real].max()) + 1
    counts = page.locator("[data-testid=matrix-counts]")
    got = tuple(int(counts.get_attribute(f"data-{k}")) for k in ("same-row", "fk", "same-column"))
    assert got == _expected_pairs(batch, b)
    return anchor


def test_written_page_shows_the_samplers_batch(example_db, tmp_path, browser):
    out = tmp_path / "view.html"
    result = run_dlkit("view", example_db, "-o", out, "--seeds", "3", "-S", "48,256",
                       "-W", "2,16", "-R", "64", "--bfs-child-policy", "uniform,recent", "-q")
    assert result.returncode == 0, result.stderr.decode()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    page.select_option("[data-testid=task]", label="user_premium (users.is_premium)")
    page.select_option("[data-testid=split]", "val")
    seeds = page.eval_on_selector_all("[data-testid=seed] option", "os => os.map(o => o.value)")
    page.select_option("[data-testid=seed]", seeds[-1])
    page.select_option("[data-testid=knob]", label="S=256 R=64 W=2 uniform")
    _check_page_against_batch(page, example_db, "user_premium", "val", 256, 64, 2)
    page.select_option("[data-testid=knob]", label="S=48 R=64 W=16 uniform")
    _check_page_against_batch(page, example_db, "user_premium", "val", 48, 64, 16)
    page.select_option("[data-testid=task]", label="review_rating (reviews.rating)")
    page.select_option("[data-testid=knob]", label="S=256 R=64 W=2 recent")
    _check_page_against_batch(page, example_db, "review_rating", "val", 256, 64, 2, "recent")
    assert page.locator(".diagram svg").count() == 1  # Graphviz drew the schema
    assert errors == []
    assert requests == [out.as_uri()]  # self-contained: nothing else is fetched
    page.close()


def _set_fields(page, numbers: dict[str, str], choices: dict[str, str], shown: str) -> None:
    """Fill a served page's setting fields, then wait until the fill line shows ``shown``
    (a JavaScript string literal): the context of the new settings arrived."""
    for testid, value in numbers.items():
        page.fill(f"[data-testid={testid}]", value)
    for testid, value in choices.items():
        page.select_option(f"[data-testid={testid}]", value)
    page.locator(f"[data-testid={next(iter(numbers))}]").dispatch_event("change")
    page.wait_for_function("document.querySelector('[data-testid=fill]') && "
                           "document.querySelector('[data-testid=fill]')"
                           f".textContent.includes({shown})")


def test_served_page_computes_any_setting(example_db, browser):
    server = subprocess.Popen([sys.executable, "-m", "dlkit", "view", str(example_db),
                               "--serve", "--port", "0", "-q"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        url = server.stdout.readline().decode().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read1().decode()
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        page.select_option("[data-testid=task]", label="review_rating (reviews.rating)")
        page.select_option("[data-testid=split]", "test")
        _set_fields(page, {"S": "40", "W": "3"}, {"P": "quota"}, "' of 40 cells'")
        _check_page_against_batch(page, example_db, "review_rating", "test", 40, 256, 3,
                                  "quota")
        # context examples: the sibling reviews of the seed's user fill a short walk
        _set_fields(page, {"S": "256", "W": "1", "E": "3"}, {"EP": "parent"},
                    "'from context examples'")
        _check_page_against_batch(page, example_db, "review_rating", "test", 256, 256, 1,
                                  "quota", 3, "parent")
        bad = page.request.get(url + "api/context?task=nope&anchor=0&S=1&R=1&W=1")
        assert bad.status == 400 and "no task" in bad.json()["error"]
        page.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    # stopping is how a server ends: exit 0, no error line
    assert server.returncode == 0
    assert b"error" not in server.stderr.read()


def test_served_page_fetches_a_seed_it_does_not_list(example_db, browser):
    """A served page lists the first seeds of a split; its "any seed" field shows any other
    seed of that split, and the server refuses a seed of another split."""
    from dlkit.db import open_database
    from dlkit.viewer.context import seeds_by_split
    from dlkit.viewer.page import Mode, PageOptions, page_data, render_page
    from dlkit.viewer.serve import make_server

    with open_database(example_db) as db:
        splits = seeds_by_split(db, "review_rating")
        page = render_page(page_data(db, PageOptions(max_listed_seeds=2), Mode.SERVE))
        server = make_server(db, page)
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/"
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto(url)
            tab.select_option("[data-testid=task]", label="review_rating (reviews.rating)")
            tab.select_option("[data-testid=split]", "val")
            listed = tab.eval_on_selector_all("[data-testid=seed] option",
                                              "os => os.map(o => +o.value)")
            assert listed == splits["val"][:2].tolist()
            assert f"first 2 of {splits['val'].size} listed" in tab.inner_text("#seed-label")
            unlisted = int(splits["val"][-1])
            tab.fill("[data-testid=anchor]", str(unlisted))
            tab.locator("[data-testid=anchor]").dispatch_event("change")
            tab.wait_for_function("document.querySelector('[data-testid=summary]').textContent"
                                  f".includes('anchor row {unlisted},')")
            assert _check_page_against_batch(tab, example_db, "review_rating", "val", 1024,
                                             256, 16) == unlisted
            other = tab.request.get(url + f"api/context?task=review_rating&split=val"
                                    f"&anchor={int(splits['test'][0])}&S=8&R=8&W=1")
            assert other.status == 400 and "test split" in other.json()["error"]
            assert tab.request.get(url + "favicon.ico").status == 204
            tab.close()
        finally:
            server.shutdown()
            thread.join()
            server.server_close()
