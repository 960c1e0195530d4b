"""The EC2 workflow study's three workflow shapes, scaled down (benchmarks/ec2study.py).

The study (Juve et al., "Data Sharing Options for Scientific Workflows on
Amazon EC2", 2010) ran:

- Montage, an 8-degree mosaic: 10,429 tasks, 4.2 GB read, 7.9 GB written;
  I/O-bound (over 95% of its time waiting on I/O), ~29,000 small files;
- Broadband, 6 sources x 8 sites: 768 tasks, 6 GB read, 303 MB written;
  memory-bound (over 75% of its runtime in tasks using over 1 GB), its
  simulations re-reading the same large inputs;
- Epigenome, chromosome 21: 529 tasks, 1.9 GB read, 300 MB written;
  CPU-bound (99% of its runtime in the CPU).

Each shape here is a list of levels (one warehouse job each, one step per
task) whose task counts, file counts and sizes follow those figures times
``scale`` (a fraction of the study's workflow), with file sizes divided by
``shrink`` besides, and CPU seconds per task times ``cpu``. Where WfCommons
(``pip install wfcommons``) has a recipe of the application (Montage,
Epigenomics), the task types and their counts per level are taken from a
workflow it generates; else (and for Broadband, which it has no recipe of)
from the structure the study describes. Standard library only, apart from
that optional import.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MB = 10**6
GB = 10**9


@dataclass
class Task:
    name: str
    cpu: float  # CPU seconds it burns
    memory: int  # bytes it holds (touched) while it runs
    reads: list[str]  # paths in its job's input: "LEVEL/FILE" or "data/FILE"
    writes: list[tuple[str, int]]  # files it writes (name, bytes)

    def as_params(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "mem": self.memory, "in": self.reads, "out": self.writes}


@dataclass
class Level:
    name: str
    reads_from: list[str]  # "data" (the workflow's input) and/or earlier levels
    tasks: list[Task] = field(default_factory=list)


@dataclass
class Shape:
    name: str
    kind: str  # what bounds it: "I/O", "memory", "CPU"
    inputs: dict[str, int]  # the workflow input's files and sizes
    levels: list[Level]
    source: str  # where the per-level counts came from

    @property
    def tasks(self) -> int:
        return sum(len(level.tasks) for level in self.levels)

    def workflow(self, function: str) -> dict[str, Any]:
        """As a warehouse workflow mapping (docs/workflows.md): one job a level."""
        jobs: dict[str, Any] = {}
        for level in self.levels:
            biggest = max((t.memory for t in level.tasks), default=0)
            jobs[level.name] = {
                "function": function,
                "input": {part: f"${part}" for part in level.reads_from},
                "params": {"tasks": [t.as_params() for t in level.tasks]},
                # Room for the interpreter and the warehouse's modules too.
                "resources": {"cpus": 1, "memory": f"{biggest // MB + 300}M"},
            }
        last = self.levels[-1].name
        return {
            "workflow": self.name,
            "inputs": {"data": None},
            "jobs": jobs,
            "outputs": {"result": f"${last}"},
        }


def _wfcommons_counts(recipe: str, tasks: int) -> Counter[str] | None:
    """Task counts by type of a workflow WfCommons generates from ``recipe``
    with about ``tasks`` tasks; None without WfCommons or that recipe."""
    try:
        from wfcommons import WorkflowGenerator  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from wfcommons.wfchef import recipes  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    cls = getattr(recipes, recipe, None)
    if cls is None:
        return None
    try:
        made = WorkflowGenerator(cls.from_num_tasks(tasks)).build_workflow()
    except Exception:  # a recipe's own minimum, or a version that differs
        return None
    found: Counter[str] = Counter()
    for node in made.nodes:
        found[str(node).split("_0")[0].rsplit("_", 1)[0].lower()] += 1
    return found


def montage(scale: float, shrink: float, cpu: float) -> Shape:
    """Many small files, little CPU: project each image, fit its overlaps,
    model the background, correct each image, add them up."""
    tasks = max(12, round(10429 * scale))
    counts = _wfcommons_counts("MontageRecipe", tasks)
    images = max(3, round(tasks / 4.6))
    source = "the study's counts (~4.6 tasks an image)"
    projected = (counts or Counter()).get("mproject") or (counts or Counter()).get("mprojectpp")
    if counts and projected:
        images = projected
        source = f"WfCommons MontageRecipe ({sum(counts.values())} tasks)"
    size = max(4096, int(4.2 * GB / 2300 / shrink))  # the study's ~1.8 MB an image
    inputs = {f"img{i:05d}.fits": size for i in range(images)}
    project = Level("mproject", ["data"])
    for i in range(images):
        project.tasks.append(
            Task(
                f"p{i}",
                0.02 * cpu,
                8 * MB,
                [f"data/img{i:05d}.fits"],
                [(f"proj{i:05d}.fits", size * 2), (f"area{i:05d}.fits", size // 2)],
            )
        )
    diff = Level("mdifffit", ["mproject"])
    for i in range(images):
        for j in (i + 1, i + 2):  # each image overlaps its next two
            if j < images:
                diff.tasks.append(
                    Task(
                        f"d{i}-{j}",
                        0.01 * cpu,
                        8 * MB,
                        [f"mproject/proj{i:05d}.fits", f"mproject/proj{j:05d}.fits"],
                        [(f"fit{i:05d}-{j:05d}.txt", 2000)],
                    )
                )
    fits = [
        f"mdifffit/fit{i:05d}-{j:05d}.txt"
        for i in range(images)
        for j in (i + 1, i + 2)
        if j < images
    ]
    model = Level(
        "mbgmodel",
        ["mdifffit"],
        [Task("model", 0.1 * cpu, 16 * MB, fits, [("corrections.tbl", 20_000)])],
    )
    background = Level("mbackground", ["mproject", "mbgmodel"])
    for i in range(images):
        background.tasks.append(
            Task(
                f"b{i}",
                0.02 * cpu,
                8 * MB,
                [f"mproject/proj{i:05d}.fits", "mbgmodel/corrections.tbl"],
                [(f"corr{i:05d}.fits", size * 2)],
            )
        )
    add = Level(
        "madd",
        ["mbackground"],
        [
            Task(
                "add",
                0.2 * cpu,
                32 * MB,
                [f"mbackground/corr{i:05d}.fits" for i in range(images)],
                [("mosaic.fits", size * 4)],
            )
        ],
    )
    levels = [project, diff, model, background, add]
    return Shape("montage", "I/O", inputs, levels, source)


def broadband(scale: float, shrink: float, cpu: float) -> Shape:
    """Memory-heavy simulations, each (source, site) re-reading its source's
    large inputs: low- and high-frequency seismograms, merged, measured."""
    combos = max(2, round(48 * scale * 10))  # 6 sources x 8 sites in the study
    sources = max(1, min(6, combos // 2))
    big = max(MB, int(6 * GB / 6 / shrink))  # each source's inputs: 1 GB in the study
    inputs = {f"source{s}.srf": big for s in range(sources)}
    inputs.update({f"site{c}.vel": 10_000 for c in range(combos)})
    memory = max(64 * MB, int(1.2 * GB / shrink))  # over 1 GB in the study
    seismogram = max(20_000, int(4 * MB / shrink))
    lf, hf, merge, measure = (
        Level(n, r)
        for n, r in (
            ("lowfreq", ["data"]),
            ("highfreq", ["data"]),
            ("merge", ["lowfreq", "highfreq"]),
            ("measure", ["merge"]),
        )
    )
    for c in range(combos):
        s = c % sources
        reads = [f"data/source{s}.srf", f"data/site{c}.vel"]
        lf.tasks.append(Task(f"lf{c}", 0.3 * cpu, memory, reads, [(f"lf{c:04d}.bbp", seismogram)]))
        hf.tasks.append(Task(f"hf{c}", 0.3 * cpu, memory, reads, [(f"hf{c:04d}.bbp", seismogram)]))
        merge.tasks.append(
            Task(
                f"m{c}",
                0.05 * cpu,
                32 * MB,
                [f"lowfreq/lf{c:04d}.bbp", f"highfreq/hf{c:04d}.bbp"],
                [(f"seis{c:04d}.bbp", seismogram)],
            )
        )
        measure.tasks.append(
            Task(
                f"r{c}",
                0.05 * cpu,
                32 * MB,
                [f"merge/seis{c:04d}.bbp"],
                [(f"rsp{c:04d}.txt", 5_000)],
            )
        )
    source = "the study's structure (WfCommons has no Broadband recipe)"
    return Shape("broadband", "memory", inputs, [lf, hf, merge, measure], source)


def epigenome(scale: float, shrink: float, cpu: float) -> Shape:
    """A CPU-bound pipeline: split lanes into chunks, filter and convert each,
    map each to the genome (most of the time), merge, compute density."""
    tasks = max(12, round(529 * scale))
    counts = _wfcommons_counts("EpigenomicsRecipe", tasks)
    chunks = max(2, round(tasks / 4.2))
    source = "the study's counts (~4.2 tasks a chunk)"
    if counts and counts.get("map"):
        chunks = counts["map"]
        source = f"WfCommons EpigenomicsRecipe ({sum(counts.values())} tasks)"
    lanes = max(1, min(4, chunks // 4))
    lane_size = max(MB, int(1.9 * GB / 4 / shrink))
    inputs = {f"lane{i}.sfq": lane_size for i in range(lanes)}
    per_lane = -(-chunks // lanes)
    chunk_size = max(4096, lane_size // per_lane)
    split = Level("split", ["data"])
    for i in range(lanes):
        split.tasks.append(
            Task(
                f"s{i}",
                0.05 * cpu,
                16 * MB,
                [f"data/lane{i}.sfq"],
                [(f"chunk{i}-{k:04d}.sfq", chunk_size) for k in range(per_lane)],
            )
        )
    names = [f"{i}-{k:04d}" for i in range(lanes) for k in range(per_lane)]
    steps = []
    previous = "split"
    for stage, cost in (("filter", 0.1), ("sol2sanger", 0.1), ("fast2bfq", 0.1), ("map", 2.0)):
        level = Level(stage, [previous])
        stem = "chunk" if previous == "split" else previous
        for n in names:
            level.tasks.append(
                Task(
                    f"{stage}{n}",
                    cost * cpu,
                    32 * MB,
                    [f"{previous}/{stem}{n}.sfq"],
                    [(f"{stage}{n}.sfq", chunk_size)],
                )
            )
        steps.append(level)
        previous = stage
    merge = Level(
        "mapmerge",
        ["map"],
        [
            Task(
                "merge",
                0.2 * cpu,
                32 * MB,
                [f"map/map{n}.sfq" for n in names],
                [("merged.map", chunk_size)],
            )
        ],
    )
    density = Level(
        "pileup",
        ["mapmerge"],
        [Task("density", 0.5 * cpu, 32 * MB, ["mapmerge/merged.map"], [("density.txt", 100_000)])],
    )
    return Shape("epigenome", "CPU", inputs, [split, *steps, merge, density], source)


SHAPES = {"montage": montage, "broadband": broadband, "epigenome": epigenome}
