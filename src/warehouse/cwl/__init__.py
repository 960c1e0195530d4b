"""CWL v1.2 on the warehouse, built on cwltool as a library (DESIGN §5.9).

cwltool loads, validates and evaluates; each CommandLineTool invocation
runs as a warehouse job (``_tool`` hooks cwltool, ``_bridge`` talks to the
warehouse, ``_step`` is the step program, ``_whole`` answers the same run
again by the finished one, ``_run`` is one run as the ``cwl-runner``
conventions want it, ``runner`` is ``wh-cwl-runner``).
Nothing here is imported by the layers below, and cwltool loads only when a
run starts.
"""

from __future__ import annotations

from warehouse.cwl._run import BAD_INPUT, UNSUPPORTED, RunOptions, run_cwl

__all__ = ["BAD_INPUT", "UNSUPPORTED", "RunOptions", "run_cwl"]
