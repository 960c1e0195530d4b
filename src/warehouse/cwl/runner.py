"""``wh-cwl-runner``: the ``cwl-runner`` interface (what ``cwltest --tool`` drives).

``wh-cwl-runner [--no-reuse] [--executor NAME] [cwltool options] DOCUMENT [JOB]``:
the output object as JSON on stdout; exit 0 success, 1 the run failed, 2 a
bad document or job file, 33 a requirement not supported (docs/cwl.md).
"""

from __future__ import annotations

import sys

from warehouse.cwl._run import RunOptions, run_cwl

__all__ = ["main", "split_options"]


def split_options(argv: list[str]) -> tuple[RunOptions, list[str]]:
    """Our own options out of ``argv``; the rest are cwltool's."""
    reuse, executor, rest = True, None, []
    args = iter(argv)
    for a in args:
        if a == "--no-reuse":
            reuse = False
        elif a == "--executor":
            executor = next(args, None)
        elif a.startswith("--executor="):
            executor = a.split("=", 1)[1]
        else:
            rest.append(a)
    return RunOptions(reuse=reuse, executor=executor), rest


def main() -> None:
    options, rest = split_options(sys.argv[1:])
    sys.exit(run_cwl(rest, options=options))


if __name__ == "__main__":
    main()
