"""``warehouse.workflow(...)``: build and run a workflow from a program."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from warehouse.errors import UsageError
from warehouse.workflows.spec import MAX_FILE_BYTES

__all__ = ["workflow"]


def workflow(
    definition: str | Path | Mapping[str, Any],
    *,
    inputs: Mapping[str, Any] | None = None,
    name_outputs: str | None = None,
    wait: bool = True,
    base_dir: Path | None = None,
    wh: object | None = None,
) -> dict[str, Any]:
    """Run a workflow as ``wh workflow run`` does; the run as ``show --json`` gives it.

    ``definition``: a workflow file's path, its YAML text, or the same shape
    as a mapping (stored as YAML). ``wh``: an open warehouse (default:
    ``warehouse.open()``, closed afterwards). The same call again resumes
    the run, or reuses every complete job once it has ended.
    """
    import warehouse
    from warehouse.workflows.workflowsview import workflows_view

    if isinstance(definition, Path):
        with definition.open("rb") as f:  # bounded: a device or a pipe has no size
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise UsageError(f"{definition}: over {MAX_FILE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{definition}: not UTF-8 text") from None
        filename = definition.name
        base_dir = base_dir or definition.resolve().parent
    elif isinstance(definition, Mapping):
        dumper = yaml.CSafeDumper if yaml.__with_libyaml__ else yaml.SafeDumper
        try:
            text = yaml.dump(dict(definition), Dumper=dumper, sort_keys=False, allow_unicode=True)
        except yaml.YAMLError as e:  # a value YAML cannot hold (an object, a function)
            raise UsageError(f"the workflow mapping cannot be written as YAML: {e}") from None
        name = definition.get("workflow")
        filename = f"{name if isinstance(name, str) else 'workflow'}.wf.yml"
    elif isinstance(definition, str):
        text, filename = definition, "workflow.wf.yml"
    else:
        raise UsageError("a workflow is a path, YAML text or a mapping")
    own = wh is None
    opened: Any = warehouse.open() if own else wh
    try:
        view = workflows_view(opened)
        started = view.start(
            text, filename, dict(inputs or {}), name_outputs=name_outputs, base_dir=base_dir
        )
        final = view.run(started["id"], wait=wait)
        return {**final, "resumed": started["resumed"]}
    finally:
        if own:
            opened.close()
