"""Hiding in a lineage graph (pure): unreadable collections and jobs become
bare "hidden" nodes and the graph keeps its shape."""

from __future__ import annotations

from warehouse.lineage.hiding import hide
from warehouse.lineage.values import Edge, Lineage, LineageCollection, LineageJob, Part

RAW, REF, OUT = (f"{c * 32}+1" for c in "abc")


def _collection(
    pdh: str, made_by: tuple[int, ...] = (), parts: tuple[Part, ...] = ()
) -> LineageCollection:
    return LineageCollection(pdh, ("put",), 1, 1, 0.0, "alice", ("n",), made_by, parts)


def _graph(function: str = "builtin:wordcount") -> Lineage:
    job = LineageJob(
        7,
        "complete",
        function,
        REF,
        "wc",
        None,
        RAW,
        OUT,
        None,
        '{"secret": 1}',
        "local",
        "alice",
        0.0,
        0.0,
        1.0,
        2.0,
        1,
    )
    return Lineage(
        OUT,
        OUT,
        "up",
        None,
        (_collection(OUT, (7,), (Part("d", RAW),)), _collection(RAW), _collection(REF)),
        (job,),
        (Edge(f"collection:{RAW}", "job:7", "input"), Edge("job:7", f"collection:{OUT}", "output")),
    )


def test_everything_readable_is_left_alone() -> None:
    g = _graph()
    assert hide(g, {RAW, REF, OUT}, {7}, set()) is g  # a built-in's code is public
    g = _graph(f"{REF}/wc.py")
    assert hide(g, {RAW, REF, OUT}, {7}, {REF}) is g


def test_unreadable_collections_and_jobs_are_hidden_in_place() -> None:
    shown = hide(_graph(), {OUT}, set(), set())
    assert [c.pdh for c in shown.collections] == [OUT, "hidden-1", "hidden-2"]
    raw = shown.collections[1]
    assert (raw.kinds, raw.names, raw.recorded_by, raw.size) == ((), (), None, None)
    assert shown.collections[0].parts == (Part("d", "hidden-1"),)
    [job] = shown.jobs
    assert (job.id, job.function, job.submitted_by, job.params) == (7, "hidden", "hidden", "{}")
    assert (job.input, job.output) == ("hidden-1", OUT)
    assert [(e.source, e.target) for e in shown.edges] == [
        ("collection:hidden-1", "job:7"),
        ("job:7", f"collection:{OUT}"),
    ]
    text = repr(shown.as_dict())
    assert RAW not in text and REF not in text and "secret" not in text


def test_a_readable_job_whose_function_is_not_shows_it_hidden() -> None:
    """A job shared is not its function shared (as in the API's job lists)."""
    shown = hide(_graph(f"{REF}/wc.py"), {RAW, REF, OUT}, {7}, set())
    [job] = shown.jobs
    assert (job.function, job.function_pdh) == ("hidden/wc.py", "hidden")
    assert (job.input, job.output, job.params) == (RAW, OUT, '{"secret": 1}')  # the job's own
