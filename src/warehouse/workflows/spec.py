"""Workflow files: parse, check and bind (pure; no warehouse needed).

A file (DESIGN §5.5)::

    workflow: NAME
    inputs:
      reads: {default: sample-reads}     # a name or PDH; -i reads=KEY overrides
      k: {default: 31}                   # a plain value, usable in params
      other:                             # no default: must be given with -i
    jobs:
      kmers:
        function: builtin:zhash
        input: $reads                    # an input, a job's output, a name or a PDH
        params: {k: $k}
        resources: {cpus: 1, memory: 1G, attempts: 3, priority: 0}
      report:
        function: git:./lab.git@main:report.py
        input: {graph: $kmers, reads: $reads}   # a combined collection
    outputs:
      contigs: $report

A string ``$name`` (the whole string) refers to an input or a job; ``$$``
at its start stands for a literal ``$``. Every problem is a ``WorkflowError``
naming the file, line and key, raised before anything is submitted.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from warehouse.errors import UsageError
from warehouse.keys import is_pdh

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_JOBS",
    "InputDecl",
    "JobSpec",
    "Ref",
    "Workflow",
    "WorkflowError",
    "bind_inputs",
    "collection_inputs",
    "output_name",
    "parse_input_option",
    "parse_workflow",
]

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_JOBS = 20_000
# Aliases let a small file stand for a huge (or endless) value: what a file
# expands to is bounded, as is how deep it nests (the checks recurse).
MAX_VALUES = 1_000_000
MAX_DEPTH = 64
_MAX_INT = 2**31 - 1

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}")
_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_-]{0,127})")
_TOP_KEYS = ("workflow", "inputs", "jobs", "outputs")
_JOB_KEYS = ("function", "input", "params", "resources")
_RESOURCE_KEYS = ("cpus", "memory", "attempts", "priority")
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b?)", re.IGNORECASE)


class WorkflowError(UsageError):
    """A bad workflow file: ``FILE:LINE: KEY: reason``."""

    def __init__(self, message: str) -> None:
        # One line whatever a file name or key holds (a newline, a control character).
        super().__init__(
            "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in message)
        )


@dataclass(frozen=True, slots=True)
class Ref:
    """``$name``: an input's value or a job's output."""

    name: str


@dataclass(frozen=True, slots=True)
class InputDecl:
    name: str
    line: int
    has_default: bool
    default: Any = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    line: int
    function: str
    # A key, a reference, or {dir: key or reference} (a combined collection).
    input: str | Ref | dict[str, str | Ref]
    params: dict[str, Any]  # may hold Ref values anywhere
    cpus: int = 1
    memory: int = 0
    max_attempts: int = 3
    priority: int = 0
    depends_on: tuple[str, ...] = ()  # jobs whose outputs this one reads


@dataclass(frozen=True)
class Workflow:
    name: str
    source: str  # the file name, for messages
    inputs: dict[str, InputDecl]
    jobs: dict[str, JobSpec]  # in file order
    outputs: dict[str, Ref]
    lines: dict[str, int] = field(default_factory=dict)  # "jobs.a.input" -> line

    def error(self, key: str, reason: str) -> WorkflowError:
        # One line, as every error: a reason from elsewhere (git's) may hold more;
        # its first line says what went wrong, the rest is advice.
        said = next((line for line in reason.splitlines() if line.strip()), reason)
        return WorkflowError(f"{self.source}:{self.lines.get(key, 1)}: {key}: {said}")


# -- reading YAML with lines ---------------------------------------------------

_YAML = "tag:yaml.org,2002:"
# The tags of what JSON holds, and of dates and !!binary (refused below in
# their own words). Any other is refused: on a mapping or a list
# (`!!python/object/apply:…`) the reader would otherwise drop it silently.
_TAGS = {_YAML + t for t in ("map", "seq", "str", "int", "float", "bool", "null")}
_TAGS |= {_YAML + "binary", _YAML + "timestamp"}


def _shown(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML) if tag.startswith(_YAML) else tag


class _Reader:
    """Turns composed YAML nodes into plain values, noting each key's line."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[str, int] = {}
        self._constructor = yaml.constructor.SafeConstructor()
        self._count = 0
        self._open: set[int] = set()  # the collections being read (a recursive alias)
        # Each collection read whole: its value, how many values it stands for and
        # how deep it nests. An alias of it is counted from here, not read again,
        # so a file whose aliases expand past the bound is refused at once.
        self._done: dict[int, tuple[Any, int, int]] = {}

    def fail(self, key: str, reason: str, line: int | None = None) -> WorkflowError:
        at = line if line is not None else self.lines.get(key, 1)
        return WorkflowError(f"{self.source}:{at}: {key or '(top)'}: {reason}")

    def value(self, node: yaml.Node, key: str, depth: int = 0) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(key, line)
        if node.tag not in _TAGS:
            raise self.fail(key, f"unknown YAML tag {_shown(node.tag)}", line)
        done = self._done.get(id(node))
        size, height = (done[1], done[2]) if done is not None else (1, 1)
        self._count += size
        if self._count > MAX_VALUES:
            raise self.fail(key, f"the file stands for more than {MAX_VALUES} values (aliases)")
        if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            return self._scalar(node, key)
        if depth + height > MAX_DEPTH:
            raise self.fail(key, f"nested deeper than {MAX_DEPTH} levels", line)
        if done is not None:  # an alias of a collection read before
            return done[0]
        if id(node) in self._open:
            raise self.fail(key, "an alias refers to a value holding it", line)
        self._open.add(id(node))
        before = self._count
        try:
            value = self._collection(node, key, depth)
        finally:
            self._open.discard(id(node))
        children = [v for _, v in node.value] if isinstance(node, yaml.MappingNode) else node.value
        height = 1 + max((self._done[id(c)][2] for c in children if id(c) in self._done), default=0)
        self._done[id(node)] = (value, self._count - before + 1, height)
        return value

    def _collection(self, node: yaml.MappingNode | yaml.SequenceNode, key: str, depth: int) -> Any:
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for k_node, v_node in node.value:
                at = k_node.start_mark.line + 1
                if k_node.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key, "merge keys (<<) are not supported: write the keys", at)
                if not isinstance(k_node, yaml.ScalarNode):
                    raise self.fail(key, "keys must be plain strings", at)
                if k_node.tag not in _TAGS:
                    raise self.fail(key, f"unknown YAML tag {_shown(k_node.tag)}", at)
                name = str(k_node.value)  # as written: `yes` or `0x1` stays that text
                sub = f"{key}.{name}" if key else name
                if name in out:
                    raise self.fail(sub, "given twice", k_node.start_mark.line + 1)
                self.lines[sub] = k_node.start_mark.line + 1
                out[name] = self.value(v_node, sub, depth + 1)
            return out
        return [self.value(v, f"{key}[{i}]", depth + 1) for i, v in enumerate(node.value)]

    def _scalar(self, node: yaml.Node, key: str) -> Any:
        line = node.start_mark.line + 1
        try:
            value = self._constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            raise self.fail(key, f"bad value: {e.problem or e.context}", line) from None
        except yaml.YAMLError as e:
            raise self.fail(key, f"bad value: {e}".splitlines()[0], line) from None
        # Only what JSON holds: params are stored and compared as JSON.
        if value is None or isinstance(value, str | bool | int):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        if isinstance(value, float):
            raise self.fail(key, f"{value} is not a number JSON holds", line)
        kind = "a date" if isinstance(value, datetime.date) else type(value).__name__
        raise self.fail(key, f"{kind} is not a JSON value (quote it to make it a string)", line)


def _load(text: str, source: str) -> tuple[Any, dict[str, int]]:
    if len(text.encode()) > MAX_FILE_BYTES:
        raise WorkflowError(f"{source}:1: (top): the file is over {MAX_FILE_BYTES} bytes")
    try:
        node = yaml.compose(
            text, Loader=yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
        )
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise WorkflowError(f"{source}:{line}: (top): bad YAML: {e.problem or e}") from None
    except yaml.YAMLError as e:
        raise WorkflowError(f"{source}:1: (top): bad YAML: {e}") from None
    if node is None:
        raise WorkflowError(f"{source}:1: (top): the file is empty")
    reader = _Reader(source)
    return reader.value(node, ""), reader.lines


# -- checking ------------------------------------------------------------------


def _refs(value: Any) -> Any:
    """``value`` with every ``$name`` string turned into a Ref (``$$x`` into ``$x``)."""
    if isinstance(value, str):
        if value.startswith("$$"):
            return value[1:]
        m = _REF.fullmatch(value)
        if m:
            return Ref(m.group(1))
        if value.startswith("$"):
            return _BadRef(value)
        return value
    if isinstance(value, dict):
        return {k: _refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_refs(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class _BadRef:
    text: str


def _walk_refs(value: Any) -> Iterable[Ref | _BadRef]:
    if isinstance(value, Ref | _BadRef):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_refs(v)


def _size(text: Any) -> int | None:
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    if not isinstance(text, str):
        return None
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        return None
    power = " kmgt".index(m.group(2).lower() or " ")
    return int(m.group(1)) << (10 * power)


def known_builtins() -> frozenset[str]:
    from warehouse.jobs.functions import builtin_dir

    return frozenset(p.stem for p in builtin_dir().glob("*.py") if not p.name.startswith("_"))


def _check_function(spec: Any, builtins: frozenset[str]) -> str | None:
    """Why ``spec`` cannot name a function, or None."""
    if not isinstance(spec, str) or not spec:
        return "must be builtin:NAME, git:REPOSITORY@REVISION:PATH or PDH/PATH"
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in builtins:
            return f"unknown function {spec!r} (built-ins: {', '.join(sorted(builtins))})"
        return None
    if spec.startswith("git:"):
        repo, at, rest = spec.removeprefix("git:").rpartition("@")
        revision, colon, path = rest.partition(":")
        if not (at and colon and repo and revision and path.strip("/")):
            return f"unknown function {spec!r}: not git:REPOSITORY@REVISION:PATH"
        return None
    head, _, path = spec.partition("/")
    if is_pdh(head) and path:
        return None
    return f"unknown function {spec!r}: not builtin:NAME, git:REPOSITORY@REVISION:PATH or PDH/PATH"


def _check_key(text: str) -> bool:
    return bool(text) and len(text) <= 1024 and "\n" not in text and not text.startswith("$")


def _check_dir(d: str) -> bool:
    parts = d.split("/")
    return (
        bool(d)
        and len(d) <= 1024
        and all(p not in ("", ".", "..") for p in parts)
        and ("\n" not in d and "\\" not in d)
    )


def parse_workflow(
    text: str | Mapping[str, Any],
    source: str = "workflow",
    *,
    builtins: frozenset[str] | None = None,
) -> Workflow:
    """Read and check a workflow (YAML text, or the same shape as a mapping).

    Functions are kept as written: a run pins them (relative git
    repositories against the file's directory).
    """
    if isinstance(text, str):
        data, lines = _load(text, source)
    else:
        data, lines = dict(text), {}
    builtins = known_builtins() if builtins is None else builtins

    def fail(key: str, reason: str) -> WorkflowError:
        return WorkflowError(f"{source}:{lines.get(key, 1)}: {key or '(top)'}: {reason}")

    if not isinstance(data, dict):
        raise fail("", "must be a mapping with workflow, inputs, jobs and outputs")
    for key in data:
        if key not in _TOP_KEYS:
            raise fail(key, f"unknown key (known: {', '.join(_TOP_KEYS)})")
    name = data.get("workflow")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise fail("workflow", "must be a name (letters, digits, _ and -)")

    raw_inputs = data.get("inputs") or {}
    if not isinstance(raw_inputs, dict):
        raise fail("inputs", "must be a mapping of input names")
    inputs: dict[str, InputDecl] = {}
    for iname, decl in raw_inputs.items():
        key = f"inputs.{iname}"
        if not _NAME.fullmatch(iname):
            raise fail(key, "an input's name is letters, digits, _ and -")
        if decl is None:
            inputs[iname] = InputDecl(iname, lines.get(key, 1), False)
            continue
        if not isinstance(decl, dict) or set(decl) - {"default", "description"}:
            raise fail(key, "must be empty or {default: VALUE, description: TEXT}")
        default = decl.get("default")
        if "default" in decl and not isinstance(default, str | int | float | bool):
            raise fail(f"{key}.default", "must be a key, a string, a number or true/false")
        inputs[iname] = InputDecl(iname, lines.get(key, 1), "default" in decl, default)

    raw_jobs = data.get("jobs")
    if not isinstance(raw_jobs, dict) or not raw_jobs:
        raise fail("jobs", "must be a mapping of at least one job")
    if len(raw_jobs) > MAX_JOBS:
        raise fail("jobs", f"more than {MAX_JOBS} jobs")
    jobs: dict[str, JobSpec] = {}
    for jname, body in raw_jobs.items():
        key = f"jobs.{jname}"
        if not _NAME.fullmatch(jname):
            raise fail(key, "a job's name is letters, digits, _ and -")
        if jname in inputs:
            raise fail(key, f"{jname!r} is an input's name too")
        if not isinstance(body, dict):
            raise fail(key, "must be a mapping with function and input")
        for k in body:
            if k not in _JOB_KEYS:
                raise fail(f"{key}.{k}", f"unknown key (known: {', '.join(_JOB_KEYS)})")
        if "function" not in body:
            raise fail(key, "function is missing")
        problem = _check_function(body["function"], builtins)
        if problem:
            raise fail(f"{key}.function", problem)
        if "input" not in body:
            raise fail(key, "input is missing")
        job_input = _refs(body["input"])
        if isinstance(job_input, dict):
            if not job_input:
                raise fail(f"{key}.input", "a combined input needs at least one part")
            for d, part in job_input.items():
                if not _check_dir(d):
                    raise fail(f"{key}.input.{d}", "a part's directory is a relative path")
                if not isinstance(part, str | Ref) or (
                    isinstance(part, str) and not _check_key(part)
                ):
                    raise fail(f"{key}.input.{d}", "must be $name, a collection name or a PDH")
        elif not isinstance(job_input, str | Ref) or (
            isinstance(job_input, str) and not _check_key(job_input)
        ):
            raise fail(f"{key}.input", "must be $name, a name, a PDH or {dir: key, ...}")
        params = _refs(body.get("params") or {})
        if not isinstance(params, dict):
            raise fail(f"{key}.params", "must be a mapping")
        resources = body.get("resources") or {}
        if not isinstance(resources, dict):
            raise fail(f"{key}.resources", "must be a mapping")
        values: dict[str, int] = {}
        for k, v in resources.items():
            rkey = f"{key}.resources.{k}"
            if k not in _RESOURCE_KEYS:
                raise fail(rkey, f"unknown resource (known: {', '.join(_RESOURCE_KEYS)})")
            if k == "memory":
                size = _size(v)
                if size is None:
                    raise fail(rkey, "a size like 512M or 4G")
                if size >= 2**63:
                    raise fail(rkey, "must be under 2**63 bytes")
                values[k] = size
            elif not isinstance(v, int) or isinstance(v, bool) or (k != "priority" and v < 1):
                raise fail(
                    rkey, "must be a whole number" + (" of at least 1" if k != "priority" else "")
                )
            elif abs(v) > _MAX_INT:
                # The catalog keeps them in 32-bit columns.
                raise fail(rkey, f"must be within ±{_MAX_INT}")
            else:
                values[k] = v
        deps: dict[str, None] = {}  # in order of first reference; a set for the fan-ins
        for ref in _walk_refs([job_input, params]):
            if isinstance(ref, _BadRef):
                raise fail(_ref_key(key, body, ref.text), f"bad reference {ref.text!r}")
            if ref.name not in inputs and ref.name not in raw_jobs:
                raise fail(_ref_key(key, body, "$" + ref.name), f"unknown reference ${ref.name}")
            if ref.name == jname:
                raise fail(_ref_key(key, body, "$" + ref.name), "a job cannot read its own output")
            if ref.name in raw_jobs:
                deps[ref.name] = None
        jobs[jname] = JobSpec(
            jname,
            lines.get(key, 1),
            body["function"],
            job_input,
            params,
            cpus=values.get("cpus", 1),
            memory=values.get("memory", 0),
            max_attempts=values.get("attempts", 3),
            priority=values.get("priority", 0),
            depends_on=tuple(deps),
        )

    raw_outputs = data.get("outputs") or {}
    if not isinstance(raw_outputs, dict):
        raise fail("outputs", "must be a mapping of output names to $job")
    outputs: dict[str, Ref] = {}
    for oname, ref in raw_outputs.items():
        key = f"outputs.{oname}"
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", oname):
            raise fail(key, "an output's name is letters, digits, _, . and -")
        value = _refs(ref)
        if not isinstance(value, Ref):
            raise fail(key, "must be $job")
        if value.name not in jobs:
            raise fail(key, f"unknown reference ${value.name} (outputs name jobs)")
        outputs[oname] = value

    workflow = Workflow(name, source, inputs, jobs, outputs, lines)
    _check_cycles(workflow)
    return workflow


def _ref_key(key: str, body: Mapping[str, Any], text: str) -> str:
    """The most precise key holding ``text`` (for the line number)."""
    value = body.get("input")
    if value == text:
        return f"{key}.input"
    if isinstance(value, dict):
        for d, v in value.items():
            if v == text:
                return f"{key}.input.{d}"
    params = body.get("params")
    if isinstance(params, dict):
        for p, v in params.items():
            if v == text or text in json.dumps(v, default=str):
                return f"{key}.params.{p}"
    return key


def _check_cycles(wf: Workflow) -> None:
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for start in wf.jobs:
        if state.get(start) == 2:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                state[node] = 1
                path.append(node)
            deps = wf.jobs[node].depends_on
            if i < len(deps):
                stack.append((node, i + 1))
                dep = deps[i]
                if state.get(dep) == 1:
                    cycle = [*path[path.index(dep) :], dep]
                    raise wf.error(f"jobs.{dep}", "cycle: " + " -> ".join(cycle))
                if state.get(dep) != 2:
                    stack.append((dep, 0))
            else:
                state[node] = 2
                path.pop()


# -- inputs --------------------------------------------------------------------


def parse_input_option(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` from ``-i``: VALUE as JSON when it parses, else the string."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise UsageError(f"-i {text!r} is not NAME=VALUE")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    if not isinstance(parsed, str | int | float | bool) or (
        isinstance(parsed, float) and not math.isfinite(parsed)
    ):
        parsed = value  # JSON holds no NaN or infinity: the text is meant
    return name, parsed


def bind_inputs(wf: Workflow, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every input's value: given, else its default; missing and unknown ones refused."""
    for name in given:
        if name not in wf.inputs:
            known = ", ".join(wf.inputs) or "none"
            raise WorkflowError(f"{wf.source}: -i {name}: no such input (inputs: {known})")
    values: dict[str, Any] = {}
    for name, decl in wf.inputs.items():
        if name in given:
            values[name] = given[name]
        elif decl.has_default:
            values[name] = decl.default
        else:
            raise wf.error(f"inputs.{name}", f"missing input: give it with -i {name}=KEY")
    return values


def collection_inputs(wf: Workflow) -> set[str]:
    """Inputs used as a job's input collection (resolved to PDHs when a run starts)."""
    used: set[str] = set()
    for job in wf.jobs.values():
        parts = job.input.values() if isinstance(job.input, dict) else [job.input]
        used.update(p.name for p in parts if isinstance(p, Ref) and p.name in wf.inputs)
    return used


def output_name(prefix: str, output: str) -> str:
    """The name an output gets with ``--name-outputs`` (names hold no ``/``)."""
    return f"{prefix}.{output}"
