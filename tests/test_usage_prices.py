"""The pure part of usage and cost: sums, price tables, prices (docs/usage.md)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from warehouse.errors import UsageError
from warehouse.usage import Usage, parse_prices, parse_since, price, total

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "prices"


def _table(name: str) -> str:
    return (EXAMPLES / name).read_text()


def test_sums_add_times_and_bytes_and_keep_the_largest_peak() -> None:
    a = Usage(1, 1, 2.0, 3.0, 6.0, 100, 10, 20)
    b = Usage(2, 3, 0.5, 1.0, 4.0, 300, 1, 2)
    assert total([a, b]) == Usage(3, 4, 2.5, 4.0, 10.0, 300, 11, 22)
    assert total([]) == Usage()
    assert Usage.from_dict({**a.as_dict(), "newer": 1}) == a


def test_a_step_row_not_measured_counts_as_nothing() -> None:
    assert Usage.of_step({"wall_seconds": None, "attempts": 2}, 4) == Usage()
    row = {"wall_seconds": 10.0, "cpu_seconds": 7.5, "attempts": 2, "peak_memory": 5}
    assert Usage.of_step(row, 4) == Usage(1, 2, 7.5, 10.0, 40.0, 5, 0, 0)


def test_ec2_hourly_billing_rounds_node_time_up_to_whole_hours() -> None:
    table = parse_prices(_table("ec2-2010.toml"), "ec2-2010.toml")
    # 1.5 node-hours of a c1.xlarge (8 cpus): 12 cpu-hours held.
    used = Usage(steps=3, reserved_seconds=12 * 3600.0, written_bytes=2 * 10**9)
    cost = price(used, table)
    assert cost.node == "c1.xlarge" and cost.billing == "hour"
    assert [(x.item, x.quantity, x.amount) for x in cost.lines] == [
        ("compute", Decimal(2), Decimal("1.36"))
    ]
    assert price(used, table, "cc1.4xlarge").total == Decimal("3.20")
    # Storage only when asked: 2 GB for 3 months at $0.15.
    assert price(used, table, months=3).total == Decimal("1.36") + Decimal("0.90")
    assert price(Usage(), table).total == 0


def test_per_second_billing_prices_the_time_used() -> None:
    text = _table("ec2-2010.toml").replace('billing = "hour"', 'billing = "second"')
    used = Usage(reserved_seconds=8 * 5400.0)  # 1.5 node-hours
    assert price(used, parse_prices(text)).total == Decimal("1.02")


def test_the_free_factory_table_derives_its_node_hour() -> None:
    table = parse_prices(_table("free-factory-2008.toml"), "ff")
    node = table.nodes["node"]
    # $170,000 over 3 years, plus $27,000 + $25,000 + $50,000 a year, over 48 nodes' hours.
    expected = (Decimal(170000) / 3 + Decimal(102000)) / (48 * 8760)
    assert node.per_hour == expected
    assert Decimal("0.377") < node.per_hour < Decimal("0.378")
    used = Usage(reserved_seconds=8 * 7200.0)  # 2 node-hours
    assert price(used, table).total == 2 * expected
    quarter = _table("free-factory-2008.toml").replace("utilization = 1", "utilization = 0.25")
    assert parse_prices(quarter).nodes["node"].per_hour == 4 * expected


@pytest.mark.parametrize(
    ("change", "line", "key"),
    [
        (
            ("per_hour = 0.68", 'per_hour = "cheap"'),
            16,
            "nodes.c1.xlarge.per_hour: must be a number",
        ),
        (
            ("per_hour = 0.68", "per_hour = -1"),
            16,
            "nodes.c1.xlarge.per_hour: must be a number 0 or more",
        ),
        (('billing = "hour"', 'billing = "monthly"'), 12, "billing: must be"),
        (("gb_month = 0.15", "gb_year = 0.15"), 24, "storage.gb_year: unknown key"),
        (("put = 0.01", "post = 0.01"), 27, "requests.post: unknown key"),
        (
            ('cpus = 8\n\n[nodes."cc', 'cpus = 0\n\n[nodes."cc'),
            17,
            "nodes.c1.xlarge.cpus: must be a whole",
        ),
        (('default_node = "c1.xlarge"', 'default_node = "m9"'), 13, "default_node: 'm9' is not"),
    ],
)
def test_a_bad_table_names_its_line_and_key(change: tuple[str, str], line: int, key: str) -> None:
    text = _table("ec2-2010.toml")
    assert change[0] in text
    with pytest.raises(UsageError) as e:
        parse_prices(text.replace(change[0], change[1], 1), "t.toml")
    assert str(e.value).startswith(f"t.toml line {line}: {key}"), str(e.value)


def test_bad_toml_and_an_unknown_node_are_refused() -> None:
    with pytest.raises(UsageError, match=r"t.toml: not a TOML price table: .*line 2"):
        parse_prices('billing = "hour"\nnodes = ]\n', "t.toml")
    with pytest.raises(UsageError, match="names no node kind"):
        parse_prices('billing = "hour"\n', "t.toml")
    table = parse_prices(_table("ec2-2010.toml"))
    with pytest.raises(UsageError, match=r"node: 'm9' is not a node kind"):
        price(Usage(), table, "m9")


def test_since_takes_dates_times_epochs_and_spans() -> None:
    assert parse_since("2026-12-01") == 1796083200.0
    assert parse_since("2026-12-01T01:00:00+01:00") == 1796083200.0
    assert parse_since("1796083200") == 1796083200.0
    assert parse_since("12h", now=100000.0) == 100000.0 - 12 * 3600
    assert parse_since("7d", now=1e6) == 1e6 - 7 * 86400
    with pytest.raises(UsageError, match="since: 'soon' is no time"):
        parse_since("soon")
