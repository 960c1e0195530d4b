"""The web pages of a controller in private mode, over HTTP: a signed-in user
sees only the collections and names it may read; a page of one it may not
read is 404, as in the API; a grant taken back counts at the next page
(docs/permissions.md)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from cluster import Controller, KeepPool, controller
from permission_helpers import wh_as
from warehouse.jobs.jobstore import insert_job

OTHER = "0123456789abcdef0123456789abcdef+3"


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        yield c


@contextmanager
def _browser(ctl: Controller, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ctl.url, timeout=60) as browser:
        answer = browser.post("/web/signin", data={"token": token, "next": "/web/"})
        assert answer.status_code == 303, answer.text
        yield browser


def _pages(pdh: str) -> list[str]:
    return [
        f"/web/c/{pdh}",
        f"/web/c/{pdh}/manifest",
        f"/web/c/{pdh}/f/reads.txt",
        f"/web/c/{pdh}/preview/reads.txt",
        f"/web/c/{pdh}/archive",
    ]


def _hidden(browser: httpx.Client, pdh: str) -> None:
    """bob sees nothing of alice's: pages 404 as for a PDH never recorded."""
    listing = browser.get("/web/collections")
    assert listing.status_code == 200, listing.text
    assert "run42" not in listing.text and pdh not in listing.text
    for page, absent in zip(_pages(pdh), _pages(OTHER), strict=True):
        hidden, nothing = browser.get(page), browser.get(absent)
        assert hidden.status_code == nothing.status_code == 404, (page, hidden.text[:300])
        assert f"no collection {pdh}" in hidden.text and "reads.txt" not in hidden.text
        assert f"no collection {OTHER}" in nothing.text
    hidden, nothing = browser.get("/web/names/run42"), browser.get("/web/names/run43")
    assert hidden.status_code == nothing.status_code == 404
    assert "no name &#39;run42&#39;" in hidden.text or "no name 'run42'" in hidden.text


def test_pages_show_a_user_only_what_it_reads(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    data = tmp_path / "data"
    data.mkdir()
    (data / "reads.txt").write_text("acgt\n" * 100)
    pdh = wh_as(ctl, alice, "put", str(data), "--name", "run42").output.split()[-1]
    (tmp_path / "bobs").mkdir()
    (tmp_path / "bobs" / "mine.txt").write_text("bob's own\n")
    bobs = wh_as(ctl, bob, "put", str(tmp_path / "bobs"), "--name", "bobs").output.split()[-1]

    with _browser(ctl, bob) as browser, _browser(ctl, alice) as alices:
        _hidden(browser, pdh)
        assert "bobs" in browser.get("/web/collections").text  # his own
        # alice sees hers, and not bob's.
        listing = alices.get("/web/collections").text
        assert "run42" in listing and "bobs" not in listing
        for page in _pages(pdh):
            assert alices.get(page).status_code == 200, page
        assert alices.get("/web/names/bobs").status_code == 404
        # alice's job: not listed for bob, its pages 404 as for none.
        # (A row as a submission makes it: this controller runs no job manager.)
        job = insert_job(
            ctl.state.engine,
            {
                "function": "builtin:wordcount",
                "function_pdh": pdh,
                "function_path": "wordcount.py",
                "function_commit": None,
                "input_pdh": pdh,
                "params": "{}",
                "cpus": 1,
                "memory": 0,
                "max_attempts": 3,
                "priority": 0,
                "executor": "nowhere",
                "reuse_key": "x" * 64,
                "submitted_by": "alice",
                "state": "complete",
                "output_pdh": bobs,  # (as if alice's job had made bob's data)
            },
        ).id
        assert f"/web/jobs/{job}" in alices.get("/web/jobs").text
        assert f"/web/jobs/{job}" not in browser.get("/web/jobs").text
        for page, absent in (
            (f"/web/jobs/{job}", "/web/jobs/99999"),
            (f"/web/jobs/{job}/steps/1", "/web/jobs/99999/steps/1"),
        ):
            hidden, nothing = browser.get(page), browser.get(absent)
            assert hidden.status_code == nothing.status_code == 404, (page, hidden.text[:300])
            assert f"no job {job}" in hidden.text
        assert browser.get(f"/web/jobs/progress.json?ids={job}").json() == {}
        assert str(job) in alices.get(f"/web/jobs/progress.json?ids={job}").json()
        assert browser.get("/web/workflows").status_code == 200
        assert browser.get("/web/workflows/99999").status_code == 404
        # Lineage: alice's collection is 404; bob's own shows what made it,
        # alice's, as a hidden node.
        assert browser.get(f"/web/lineage/{pdh}").status_code == 404
        drawn = browser.get(f"/web/lineage/{bobs}")
        assert drawn.status_code == 200, drawn.text[:300]
        assert "hidden" in drawn.text and pdh not in drawn.text
        assert pdh in alices.get(f"/web/lineage/{bobs}").text
        wh_as(ctl, alice, "share", f"job:{job}", "bob")
        assert f"/web/jobs/{job}" in browser.get("/web/jobs").text
        assert browser.get(f"/web/jobs/{job}").status_code == 200
        # Regol: no watches of his; another's is 404.
        assert browser.get("/web/regol").status_code == 200
        assert browser.get("/web/regol/99999").status_code == 404
        # Pages that do not filter yet stay closed to users.
        assert browser.get("/web/cluster").status_code == 403
        assert browser.get("/web/submit").status_code == 403

        wh_as(ctl, alice, "share", "run42", "bob")
        assert "run42" in browser.get("/web/collections").text
        assert browser.get("/web/names/run42").status_code == 200
        for page in _pages(pdh):
            assert browser.get(page).status_code == 200, page
        assert browser.get(f"/web/c/{pdh}/f/reads.txt").text == "acgt\n" * 100
        assert "run42" in browser.get(f"/web/c/{pdh}").text  # the name on it, his to read

        # Taken back: the very next page is 404 again.
        wh_as(ctl, alice, "unshare", "run42", "bob")
        _hidden(browser, pdh)

    # Admins see everything, as before.
    with _browser(ctl, ctl.admin_token) as admin:
        listing = admin.get("/web/collections").text
        assert "run42" in listing and "bobs" in listing
        assert admin.get("/web/lineage/" + pdh).status_code == 200
