"""Price tables (TOML) and what a usage costs by one (docs/usage.md).

Money is ``Decimal`` throughout, read from the table as written, so a cost
is exact to the table's own digits (0.68 × 2 h is 1.36, never 1.3599…).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from warehouse.errors import UsageError
from warehouse.usage.model import Usage

__all__ = ["Cost", "CostLine", "NodeKind", "PriceTable", "parse_prices", "price"]

_HOURS_PER_YEAR = 8760
_GB = 10**9  # prices per GB are per 10^9 bytes, as the clouds bill
_REQUEST_KINDS = ("get", "put", "list", "delete")
_TOP = {"name", "currency", "billing", "default_node", "nodes", "storage", "requests", "transfer"}
_NODE = {"per_hour", "cpus", "memory", "hardware", "years", "per_year", "nodes", "utilization"}


@dataclass(frozen=True, slots=True)
class NodeKind:
    name: str
    per_hour: Decimal  # what one node-hour costs (derived, for an on-premises cluster)
    cpus: int


@dataclass(frozen=True, slots=True)
class PriceTable:
    name: str
    currency: str
    billing: str  # "hour": node time rounded up to whole hours; "second": as used
    nodes: dict[str, NodeKind]
    default_node: str
    gb_month: Decimal = Decimal(0)
    per_1000_requests: dict[str, Decimal] = field(default_factory=dict)
    gb_in: Decimal = Decimal(0)
    gb_out: Decimal = Decimal(0)


@dataclass(frozen=True, slots=True)
class CostLine:
    item: str  # "compute", "storage"
    quantity: Decimal
    unit: str  # "node-hour", "GB-month"
    unit_price: Decimal
    amount: Decimal


@dataclass(frozen=True, slots=True)
class Cost:
    table: str
    currency: str
    billing: str
    node: str
    lines: list[CostLine]

    @property
    def total(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal(0))

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "currency": self.currency,
            "billing": self.billing,
            "node": self.node,
            "lines": [
                {
                    "item": x.item,
                    "quantity": str(x.quantity),
                    "unit": x.unit,
                    "unit_price": str(x.unit_price),
                    "amount": str(x.amount),
                }
                for x in self.lines
            ],
            "total": str(self.total),
        }


class _Table:
    """The parsed TOML and its text, to name the line of a bad key."""

    def __init__(self, text: str, source: str) -> None:
        self.lines = text.splitlines()
        self.source = source

    def fail(self, path: tuple[str, ...], why: str) -> UsageError:
        line = self._line(path)
        where = f"{self.source} line {line}" if line else self.source
        return UsageError(f"{where}: {'.'.join(path)}: {why}")

    def _line(self, path: tuple[str, ...]) -> int | None:
        """The line defining ``path`` (a key under its table header, or the
        header itself); None when it cannot be told (an inline table)."""
        header: tuple[str, ...] = ()
        for number, raw in enumerate(self.lines, 1):
            text = raw.strip()
            found = re.fullmatch(r"\[\s*([^\[\]]+?)\s*\]\s*(#.*)?", text)
            if found:
                header = _dotted(found.group(1))
                if header == path:
                    return number
                continue
            key = re.match(r"((?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=", text)
            if key and header + _dotted(key.group(1)) == path:
                return number
        return None


def _dotted(key: str) -> tuple[str, ...]:
    """A dotted TOML key's parts (``nodes."c1.xlarge"``: two)."""
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([^.\s\"']+)", key)
    return tuple(a or b or c for a, b, c in parts)


def _money(t: _Table, path: tuple[str, ...], value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        raise t.fail(path, f"must be a number, not {value!r}")
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        raise t.fail(path, f"must be a number 0 or more, not {value}")
    return amount


def _section(t: _Table, data: dict[str, Any], key: str) -> dict[str, Any]:
    found = data.get(key, {})
    if not isinstance(found, dict):
        raise t.fail((key,), "must be a table")
    return found


def _node(t: _Table, name: str, spec: Any) -> NodeKind:
    path = ("nodes", name)
    if not isinstance(spec, dict):
        raise t.fail(path, "must be a table")
    for key in spec:
        if key not in _NODE:
            raise t.fail((*path, key), f"unknown key (known: {', '.join(sorted(_NODE))})")
    cpus = spec.get("cpus")
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
        raise t.fail((*path, "cpus"), f"must be a whole number 1 or more, not {cpus!r}")
    if "per_hour" in spec:
        return NodeKind(name, _money(t, (*path, "per_hour"), spec["per_hour"]), cpus)
    if "hardware" not in spec:
        raise t.fail(path, "needs per_hour, or hardware, years, per_year and nodes")
    # An on-premises cluster: its purchase spread over its years, plus what
    # it costs each year (power, space, staff), shared by its nodes' hours.
    hardware = _money(t, (*path, "hardware"), spec["hardware"])
    years = _money(t, (*path, "years"), spec.get("years"))
    nodes = spec.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise t.fail((*path, "nodes"), f"must be a whole number 1 or more, not {nodes!r}")
    per_year = spec.get("per_year", {})
    if isinstance(per_year, dict):
        yearly = sum(
            (_money(t, (*path, "per_year", k), v) for k, v in per_year.items()), Decimal(0)
        )
    else:
        yearly = _money(t, (*path, "per_year"), per_year)
    utilization = _money(t, (*path, "utilization"), spec.get("utilization", 1))
    if years == 0:
        raise t.fail((*path, "years"), "must be more than 0")
    if not 0 < utilization <= 1:
        raise t.fail((*path, "utilization"), "must be more than 0 and at most 1")
    # Hours used are the hours paid for divided by the share of them used.
    hours = nodes * _HOURS_PER_YEAR * utilization
    return NodeKind(name, (hardware / years + yearly) / hours, cpus)


def parse_prices(text: str, source: str = "price table") -> PriceTable:
    """A price table from TOML ``text``; UsageError naming the line and key."""
    t = _Table(text, source)
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{source}: not a TOML price table: {e}") from None
    for key in data:
        if key not in _TOP:
            raise t.fail((key,), f"unknown key (known: {', '.join(sorted(_TOP))})")
    billing = data.get("billing", "second")
    if billing not in ("hour", "second"):
        raise t.fail(("billing",), f'must be "hour" or "second", not {billing!r}')
    nodes_spec = _section(t, data, "nodes")
    nodes = {name: _node(t, name, spec) for name, spec in nodes_spec.items()}
    if not nodes:
        raise t.fail(("nodes",), "names no node kind ([nodes.KIND] with per_hour and cpus)")
    default = data.get("default_node", next(iter(nodes)))
    if default not in nodes:
        raise t.fail(("default_node",), f"{default!r} is not a node kind of the table")
    storage = _section(t, data, "storage")
    for key in storage:
        if key != "gb_month":
            raise t.fail(("storage", key), "unknown key (known: gb_month)")
    requests = _section(t, data, "requests")
    for key in requests:
        if key not in _REQUEST_KINDS:
            raise t.fail(("requests", key), f"unknown key (known: {', '.join(_REQUEST_KINDS)})")
    transfer = _section(t, data, "transfer")
    for key in transfer:
        if key not in ("gb_in", "gb_out"):
            raise t.fail(("transfer", key), "unknown key (known: gb_in, gb_out)")
    for key in ("name", "currency"):
        if not isinstance(data.get(key, ""), str):
            raise t.fail((key,), "must be a string")
    return PriceTable(
        name=data.get("name", source),
        currency=data.get("currency", "USD"),
        billing=billing,
        nodes=nodes,
        default_node=default,
        gb_month=_money(t, ("storage", "gb_month"), storage.get("gb_month", 0)),
        per_1000_requests={k: _money(t, ("requests", k), v) for k, v in requests.items()},
        gb_in=_money(t, ("transfer", "gb_in"), transfer.get("gb_in", 0)),
        gb_out=_money(t, ("transfer", "gb_out"), transfer.get("gb_out", 0)),
    )


def price(usage: Usage, table: PriceTable, node: str | None = None, *, months: float = 0.0) -> Cost:
    """What ``usage`` costs by ``table`` on nodes of kind ``node``.

    Compute: the node time the steps held (their wall seconds times the cpus
    their jobs asked, over the node's cpus); with hourly billing rounded up
    to whole node-hours, once for the whole usage. Storage, when ``months``
    is given: the bytes the steps wrote, kept that long.
    """
    kind = table.nodes.get(node or table.default_node)
    if kind is None:
        known = ", ".join(sorted(table.nodes))
        raise UsageError(f"node: {node!r} is not a node kind of {table.name} ({known})")
    if months < 0 or not math.isfinite(months):
        raise UsageError(f"months: must be 0 or more, not {months}")
    node_seconds = Decimal(repr(usage.reserved_seconds)) / kind.cpus
    if table.billing == "hour":
        hours = Decimal(math.ceil(node_seconds / 3600))
    else:
        hours = node_seconds / 3600
    lines = [CostLine("compute", hours, "node-hour", kind.per_hour, hours * kind.per_hour)]
    if months:
        gb_months = Decimal(usage.written_bytes) / _GB * Decimal(repr(months))
        lines.append(
            CostLine("storage", gb_months, "GB-month", table.gb_month, gb_months * table.gb_month)
        )
    return Cost(table.name, table.currency, table.billing, kind.name, lines)
