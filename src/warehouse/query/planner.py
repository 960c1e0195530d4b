"""The query compiler (pure): parse with sqlglot, check names, plan the stages.

A plan is JSON (the params of the ``builtin:query`` job):

- ``tables``: name → ``{"role", "key", "partitions", "format", "columns"}``; role
  ``partitioned`` (partition p reads the table's part p), ``shuffle``
  (repartitioned by ``key`` first: a level-1 stage), or ``broadcast``
  (every partition step reads the whole table); ``columns``: the table's
  columns the query reads, sorted, as the table names them (absent where not
  known: a table without its columns listed, SQL the resolver cannot follow;
  plans made before it was added lack it too);
- ``partitions``: N, the partition steps (level 2);
- ``partial``: the SQL each partition step runs; ``final``: the SQL the
  last step runs over the partials (a view named ``partials``);
- ``groups``: the partitions each level-2 step runs, in lists (a step runs
  several when partitions are small: a process start costs more than
  reading a few MB);
- or ``mode: single`` with ``sql``: one step over all partitions, for the
  shapes the compiler does not distribute (subqueries, CTEs, window
  functions, DISTINCT, set operations, outer joins, aggregates that do not
  split into partial ones), and, unless told to distribute, for queries
  whose tables hold at most ``ONE_STEP_BYTES`` in all (starting and
  feeding more processes would cost more than it spreads).

The SQL is parsed and checked in ``parsing``; the columns each table is
read for are found in ``columns``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from warehouse.errors import UsageError
from warehouse.query.columns import columns_used
from warehouse.query.parsing import DIALECT, check_names, parse, table_names
from warehouse.query.tables import TableMeta, hash_id

__all__ = [
    "BROADCAST_LIMIT",
    "DEFAULT_SHUFFLE_PARTITIONS",
    "HOW",
    "MAX_PARAMS",
    "ONE_STEP_BYTES",
    "STEP_BYTES",
    "explain",
    "plan",
]

BROADCAST_LIMIT = 64 << 20  # bytes: a smaller table joined to a partitioned one is sent whole
DEFAULT_SHUFFLE_PARTITIONS = 4
ONE_STEP_BYTES = 1 << 30  # tables holding at most this in all are read by one step (auto)
STEP_BYTES = 256 << 20  # a partition step reads about this much at least, if there is as much
MIN_PARTITION_STEPS = 2  # but partitions are spread over two steps at least (two cores)
HOW = ("auto", "one-step", "distributed")
MAX_PARAMS = 96 << 10  # bytes of a query job's params (JSON): under 128 KiB, see catalog


class _Unsplittable(Exception):
    """This shape runs as one step."""


def plan(sql: str, tables: Mapping[str, TableMeta], how: str = "auto") -> dict[str, Any]:
    """Compile ``sql`` over ``tables`` (name → description of the tables it names).

    ``how``: ``auto`` (one step for small tables, else distributed where the
    shape allows), ``one-step`` or ``distributed`` (where the shape allows).
    """
    if how not in HOW:
        raise UsageError(f"query: plan must be one of {', '.join(HOW)}")
    tree = parse(sql)
    check_names(tree, tables)
    used = {n: tables[n] for n in table_names(tree)}
    total = sum(t.size for t in used.values())
    if how == "one-step" or (how == "auto" and total <= ONE_STEP_BYTES):
        why = f"{total} bytes in all, at most {ONE_STEP_BYTES}"
        why = "asked for" if how == "one-step" else why
        compiled = _single(tree, used, why)
    else:
        try:
            compiled = _distributed(tree, used)
        except _Unsplittable as e:
            compiled = _single(tree, used, str(e))
    read = columns_used(tree, used)
    if read is not None:
        for name, t in compiled["tables"].items():
            t["columns"] = read[name]
    return compiled


def _single(tree: exp.Expression, used: Mapping[str, TableMeta], why: str) -> dict[str, Any]:
    return {"mode": "single", "sql": tree.sql(dialect=DIALECT), "why": why, **_all(used)}


def groups(partitions: int, per_partition: int) -> list[list[int]]:
    """The partitions of each partition step (every k-th one), each step
    reading about ``STEP_BYTES``, over at least ``MIN_PARTITION_STEPS`` steps."""
    per_step = max(1, STEP_BYTES // max(1, per_partition))
    steps = max(min(MIN_PARTITION_STEPS, partitions), -(-partitions // per_step))
    return [list(range(partitions))[k::steps] for k in range(steps)]


def _all(used: Mapping[str, TableMeta]) -> dict[str, Any]:
    return {"tables": {n: {"role": "all", "format": t.format} for n, t in used.items()}}


def _distributed(tree: exp.Expression, used: Mapping[str, TableMeta]) -> dict[str, Any]:
    if not isinstance(tree, exp.Select):
        raise _Unsplittable("a set operation")
    if tree.args.get("with") or tree.args.get("distinct"):
        raise _Unsplittable("a WITH or DISTINCT")
    for node in tree.find_all(exp.Select, exp.Window, exp.Subquery):
        if node is not tree:
            raise _Unsplittable("a subquery or window function")
    for join in tree.args.get("joins") or []:
        if join.side or join.kind not in ("", "INNER", None):
            raise _Unsplittable("an outer or special join")
    roles = _roles(tree, used)
    partitions = max([r["partitions"] for r in roles.values() if r["role"] != "broadcast"] or [0])
    if partitions <= 1:
        raise _Unsplittable("no table is partitioned or joined on a key")
    partial, final = _split(tree)
    # What one partition step reads per partition (a broadcast table, whole).
    per_partition = sum(
        r["bytes"] if r["role"] == "broadcast" else r["bytes"] // partitions for r in roles.values()
    )
    return {
        "mode": "partitioned",
        "partitions": partitions,
        "groups": groups(partitions, per_partition),
        "tables": roles,
        "partial": partial,
        "final": final,
    }


def _equalities(tree: exp.Select) -> list[tuple[exp.Column, exp.Column]]:
    conds: list[exp.Expression] = []
    if tree.args.get("where"):
        conds.append(tree.args["where"].this)
    for join in tree.args.get("joins") or []:
        if join.args.get("on"):
            conds.append(join.args["on"])
    pairs = []
    for cond in conds:
        for eq in _conjuncts(cond):
            if not isinstance(eq, exp.EQ):
                continue
            if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column):
                pairs.append((eq.this, eq.expression))
    return pairs


def _conjuncts(cond: exp.Expression) -> list[exp.Expression]:
    if isinstance(cond, exp.And):
        return _conjuncts(cond.this) + _conjuncts(cond.expression)
    if isinstance(cond, exp.Paren):
        return _conjuncts(cond.this)
    return [cond]


def _owner(column: exp.Column, tree: exp.Select, used: Mapping[str, TableMeta]) -> str | None:
    """The table a column belongs to (by qualifier or alias, else by its name)."""
    if column.table:
        for t in tree.find_all(exp.Table):
            if column.table in (t.alias_or_name, t.name):
                return t.name
        return None
    name = column.name.casefold()
    owners = [n for n, t in used.items() if any(c.casefold() == name for c, _ in t.columns)]
    return owners[0] if len(owners) == 1 else None


def _roles(tree: exp.Select, used: Mapping[str, TableMeta]) -> dict[str, dict[str, Any]]:
    if len(used) != len(list(tree.find_all(exp.Table))):
        raise _Unsplittable("a table named twice")
    # Join key classes: columns (table, name) equal to each other, transitively.
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(x: tuple[str, str]) -> tuple[str, str]:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for a, b in _equalities(tree):
        ta, tb = _owner(a, tree, used), _owner(b, tree, used)
        if ta and tb and ta != tb:  # columns by their case-folded names, as DuckDB's
            parent[find((ta, a.name.casefold()))] = find((tb, b.name.casefold()))
    partitioned = sorted(
        (n for n, t in used.items() if t.partitions > 1 and t.partitioned_by),
        key=lambda n: -used[n].size,
    )
    # The anchor class: the biggest partitioned table's key, else the biggest join key.
    if partitioned:
        anchor_table = partitioned[0]
        anchor = find((anchor_table, (used[anchor_table].partitioned_by or "").casefold()))
        n = used[anchor_table].partitions
    else:
        joined = [k for k in parent if find(k) != k or any(find(v) == k for v in parent)]
        if not joined:
            raise _Unsplittable("no table is partitioned or joined on a key")
        biggest = max(joined, key=lambda k: used[k[0]].size)
        anchor, anchor_table, n = find(biggest), biggest[0], DEFAULT_SHUFFLE_PARTITIONS
    roles: dict[str, dict[str, Any]] = {}
    for name, meta in used.items():
        key = next((c for c, _ in meta.columns if find((name, c.casefold())) == anchor), None)
        base = {"format": meta.format, "partitions": n, "key": key, "bytes": meta.size}
        on_key = key is not None and meta.partitioned_by == key
        anchor_meta = used[anchor_table]
        if not partitioned and key is not None:
            roles[name] = {**base, "role": "shuffle"}  # nothing is partitioned: both move
        elif on_key and (
            name == anchor_table or (meta.partitions == n and meta.co_partitioned(anchor_meta))
        ):
            roles[name] = {**base, "role": "partitioned"}
        elif meta.size <= BROADCAST_LIMIT and (name != anchor_table and len(used) > 1):
            roles[name] = {**base, "role": "broadcast", "partitions": 1}
        elif key is not None:
            roles[name] = {**base, "role": "shuffle"}
        else:
            raise _Unsplittable(f"table {name} is big and not joined on the partition key")
    shuffled = any(r["role"] == "shuffle" for r in roles.values())
    if shuffled and used[anchor_table].hash != hash_id():
        # Rows shuffled now land by this DuckDB's hash: the anchor must move too.
        for r in roles.values():
            if r["role"] == "partitioned":
                r["role"] = "shuffle"
    if all(r["role"] == "broadcast" for r in roles.values()):
        raise _Unsplittable("every table is small")
    return roles


def _output_name(e: exp.Expression) -> str:
    return e.alias_or_name if isinstance(e, exp.Alias | exp.Column) else e.sql(DIALECT)


def _split(tree: exp.Select) -> tuple[str, str]:
    """(SQL per partition, SQL over the partials) for a single SELECT."""
    select = tree.copy()
    order = select.args.pop("order", None)
    limit = select.args.pop("limit", None)
    offset = select.args.pop("offset", None)
    group = select.args.pop("group", None)
    having = select.args.pop("having", None)
    aggregates = any(
        isinstance(n, exp.AggFunc) for e in select.expressions for n in e.find_all(exp.AggFunc)
    )
    if not aggregates and group is None:
        # Scan, filter, project: each partition keeps its own top rows under a LIMIT.
        outputs = [_output_name(e) for e in select.expressions]
        star = any(isinstance(e, exp.Star) for e in select.expressions)
        if len(set(outputs)) != len(outputs) or (star and len(_tables(tree)) > 1):
            raise _Unsplittable("two columns of the same name")
        if order is not None:
            for o in order.expressions:
                if not (isinstance(o.this, exp.Column) and o.this.name in outputs) and not star:
                    raise _Unsplittable("ORDER BY something not selected")
        partial = select.copy()
        if limit is not None:
            # Each partition's first LIMIT + OFFSET rows; the final step skips OFFSET.
            partial.set("order", order)
            partial.set("limit", exp.Limit(expression=_literal_sum(limit, offset)))
        final = exp.select("*").from_("partials")
        if order is not None:
            # Over the partials, columns by their bare names (``ORDER BY f.id``: ``id``).
            final.set("order", order.transform(_bare))
        final.set("limit", limit)
        final.set("offset", offset)
        return partial.sql(DIALECT), final.sql(DIALECT)

    if group is not None and group.args.get("all"):
        raise _Unsplittable("GROUP BY ALL")
    groups = [_group_key(g, select) for g in group.expressions] if group is not None else []
    partial_cols: list[Any] = [exp.alias_(g.copy(), f"_g{j}") for j, g in enumerate(groups)]
    group_names = {g.sql(DIALECT): f"_g{j}" for j, g in enumerate(groups)}

    def merge(node: Any) -> Any:
        if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
            return _merge_aggregate(node.this, partial_cols, node.expression)
        if isinstance(node, exp.AggFunc):
            return _merge_aggregate(node, partial_cols)
        if node.sql(DIALECT) in group_names:
            return exp.column(group_names[node.sql(DIALECT)])
        if isinstance(node, exp.Column) and node.table:
            bare = exp.column(node.name).sql(DIALECT)
            if bare in group_names:
                return exp.column(group_names[bare])
        return node

    final_exprs = []
    for e in select.expressions:
        body = e.this if isinstance(e, exp.Alias) else e
        final_exprs.append(exp.alias_(body.copy().transform(merge), _output_name(e)))
    final = exp.select(*final_exprs).from_("partials")
    if groups:
        final.set(
            "group", exp.Group(expressions=[exp.column(f"_g{j}") for j in range(len(groups))])
        )
    if having is not None:
        final.set("having", having.copy().transform(merge))
    if order is not None:
        aliases = {_output_name(e) for e in select.expressions}
        final.set(
            "order",
            order.copy().transform(
                lambda n: (
                    n
                    if isinstance(n, exp.Column) and n.name in aliases and not n.table
                    else merge(n)
                )
            ),
        )
    final.set("limit", limit)
    final.set("offset", offset)
    partial = select.copy()
    partial.set("expressions", partial_cols)  # filled by merge() above
    if groups:
        partial.set("group", exp.Group(expressions=[g.copy() for g in groups]))
    if not partial_cols:
        raise _Unsplittable("nothing to compute per partition")
    return partial.sql(DIALECT), final.sql(DIALECT)


def _tables(tree: exp.Expression) -> list[exp.Table]:
    return list(tree.find_all(exp.Table))


def _bare(node: Any) -> Any:
    return exp.column(node.name) if isinstance(node, exp.Column) and node.table else node


def _literal_sum(limit: exp.Expression, offset: exp.Expression | None) -> exp.Expression:
    """LIMIT + OFFSET as one number (both must be plain integers)."""
    total = 0
    for part in (limit, offset):
        value = part.args.get("expression") if part is not None else None
        if value is None:
            continue
        if not (isinstance(value, exp.Literal) and value.is_int):
            raise _Unsplittable("a LIMIT or OFFSET that is not a number")
        total += int(value.this)
    return exp.Literal.number(total)


def _group_key(key: exp.Expression, select: exp.Select) -> exp.Expression:
    """A GROUP BY key as an expression over the tables: ``GROUP BY 1`` is the
    first selected expression; an output alias is refused (one step)."""
    if isinstance(key, exp.Literal) and key.is_int:
        n = int(key.this)
        if not 1 <= n <= len(select.expressions):
            raise _Unsplittable("a GROUP BY position out of range")
        chosen: exp.Expression = select.expressions[n - 1]
        if isinstance(chosen, exp.Alias):
            chosen = chosen.this
        return chosen.copy()
    aliases = {e.alias: e.this for e in select.expressions if isinstance(e, exp.Alias)}
    if isinstance(key, exp.Column) and not key.table and key.name in aliases:
        body = aliases[key.name]
        if not (isinstance(body, exp.Column) and body.name == key.name):
            # An alias or a table's column of that name: DuckDB decides which.
            raise _Unsplittable("GROUP BY an output name")
    return key


def _merge_aggregate(node: Any, partial_cols: list[Any], where: Any = None) -> Any:
    """The final step's form of an aggregate; its partial ones are added to
    ``partial_cols`` (each under ``FILTER (where)``, if given)."""

    def add(e: Any) -> Any:
        name = f"_a{len(partial_cols)}"
        if where is not None:
            e = exp.Filter(this=e, expression=where.copy())
        partial_cols.append(exp.alias_(e, name))
        return exp.column(name)

    if isinstance(node.this, exp.Distinct) or node.args.get("distinct"):
        raise _Unsplittable("an aggregate over DISTINCT values")
    if isinstance(node, exp.Sum):
        return exp.func("sum", add(node.copy()))
    if isinstance(node, exp.Count):
        # A count, as in one step (a sum of counts is HUGEINT).
        total = exp.func("coalesce", exp.func("sum", add(node.copy())), exp.Literal.number(0))
        return exp.cast(total, "BIGINT")
    if isinstance(node, exp.Min | exp.Max):
        return node.__class__(this=add(node.copy()))
    if isinstance(node, exp.Avg):
        total = add(exp.func("sum", node.this.copy()))
        count = add(exp.func("count", node.this.copy()))
        return exp.Div(
            this=exp.cast(exp.func("sum", total), "DOUBLE"), expression=exp.func("sum", count)
        )
    raise _Unsplittable(f"the aggregate {node.sql(DIALECT)}")


def explain(p: Mapping[str, Any]) -> str:
    """The plan for people."""
    if p["mode"] == "single":
        tables = ", ".join(sorted(p["tables"]))
        head = f"one step over every partition of {tables} ({p.get('why', '')})\n  {p['sql']}\n"
        return head + "".join(line + "\n" for line in _read_lines(p))
    lines = []
    for name, t in sorted(p["tables"].items()):
        if t["role"] == "partitioned":
            lines.append(
                f"{name}: partitioned on {t['key']}, {t['partitions']} partitions, no data moved"
            )
        elif t["role"] == "broadcast":
            lines.append(f"{name}: broadcast to every partition step ({t['bytes']} bytes each)")
        else:
            lines.append(
                f"{name}: shuffled by {t['key']} into {t['partitions']} partitions (level 1)"
            )
    lines += _read_lines(p)
    steps = p.get("groups") or [[n] for n in range(p["partitions"])]
    spread = "" if len(steps) == p["partitions"] else f" in {len(steps)} steps"
    lines.append(f"level 2: {p['partitions']} partitions{spread}: {p['partial']}")
    lines.append(f"level 3: final step over the partials: {p['final']}")
    return "\n".join(lines) + "\n"


EXPLAIN_COLUMNS = 12  # names shown per table by ``explain``; the rest are counted


def _read_lines(p: Mapping[str, Any]) -> list[str]:
    """One line per table whose columns the plan lists: those the query reads."""
    lines = []
    for name, t in sorted(p["tables"].items()):
        cols = t.get("columns")
        if not isinstance(cols, list):
            continue  # not known (a plan made before, or SQL not resolved)
        shown = ", ".join(str(c) for c in cols[:EXPLAIN_COLUMNS]) or "none"
        more = len(cols) - EXPLAIN_COLUMNS
        lines.append(f"{name} columns read: {shown}" + (f" and {more} more" if more > 0 else ""))
    return lines
