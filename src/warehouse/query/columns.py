"""The columns of each table a query reads (pure), as a plan lists them so
a step reads only those: resolved by sqlglot's optimizer, a name it cannot
place counted for every table holding it, nothing listed where unknown.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from warehouse.query.parsing import DIALECT, tables_have_columns
from warehouse.query.tables import TableMeta

__all__ = ["RESOLVE_BUDGET", "columns_used"]


def columns_used(
    tree: exp.Expression, used: Mapping[str, TableMeta]
) -> dict[str, list[str]] | None:
    """The columns of each table in ``used`` the query reads, sorted, as the
    table names them; None where that is not known (a table without its
    columns listed, SQL the resolver cannot follow or would take long over).

    ``*`` and ``t.*`` read every column of the tables they cover (and
    ``COLUMNS(...)``, a table's name used as a column: its whole row);
    ``count(*)`` reads none. A name the resolver leaves unplaced counts for
    every table with a column of that name: the list may hold a column
    DuckDB does not read, never miss one it does."""
    if not used or not tables_have_columns(used):
        return None
    if len({n.casefold() for n in used}) != len(used):
        return None  # two tables told apart only by case: not resolved by name here
    if _column_depths(tree) > RESOLVE_BUDGET:
        return None
    try:
        return _resolve(tree, used)
    except (SqlglotError, RecursionError, ValueError, KeyError, TypeError, AttributeError):
        return None  # sqlglot's optimizer did not follow this SQL: the step guesses


# sqlglot's resolver walks up from each column to the root, more than once:
# a chain of thousands of terms would take seconds. Past this sum of the
# columns' depths, the plan lists no columns (the step guesses from its
# words). The measure is of the SQL alone, so the plan stays the same for it.
RESOLVE_BUDGET = 200_000


def _column_depths(tree: exp.Expression) -> int:
    """The sum of the depths of the column references in ``tree``."""
    total = 0
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, exp.Column):
            total += depth
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return total


def _resolve(tree: exp.Expression, used: Mapping[str, TableMeta]) -> dict[str, list[str]]:
    by_fold = {n.casefold(): n for n in used}
    spelled = {n: {c.casefold(): c for c, _ in m.columns} for n, m in used.items()}
    # Quoted, so any name is one identifier; the types do not matter to
    # placing names (and a DuckDB type sqlglot cannot read would fail it).
    schema: dict[str, object] = {
        _quote(n): {_quote(c): "INT" for c, _ in m.columns} for n, m in used.items()
    }
    qualified = qualify(
        tree.copy(),
        schema=schema,
        dialect=DIALECT,
        validate_qualify_columns=False,
        quote_identifiers=False,
        identify=False,
    )
    read: dict[str, set[str]] = {n: set() for n in used}

    def table_of(source: object) -> str | None:
        if isinstance(source, exp.Table):
            return by_fold.get(source.name.casefold())
        return None

    def every(name: str | None) -> None:
        if name is not None:
            read[name] |= set(spelled[name].values())

    def by_name(column: str) -> None:
        for name, cols in spelled.items():
            if column.casefold() in cols:
                read[name].add(cols[column.casefold()])

    for scope in traverse_scope(qualified):
        for node in scope.find_all(exp.Column, exp.Star, exp.Columns, exp.TableColumn):
            if isinstance(node, exp.TableColumn):  # a table's name as a column: its whole row
                whole = table_of(_source(scope, node.name))
                if whole is not None:
                    every(whole)
                else:
                    by_name(node.name)
                continue
            if isinstance(node, exp.Columns) or (
                isinstance(node, exp.Star) and not isinstance(node.parent, exp.Column | exp.Count)
            ):
                for src in scope.sources.values():  # every column of this scope's tables
                    every(table_of(src))
                continue
            if not isinstance(node, exp.Column):
                continue  # count(*)
            source = _source(scope, node.table) if node.table else None
            if isinstance(source, Scope):
                continue  # a subquery's or CTE's output: its own scope reads the tables
            name = table_of(source)
            if isinstance(node.this, exp.Star):  # t.*, left unexpanded
                if name is not None:
                    every(name)
                else:
                    for other in read:
                        every(other)
            elif name is not None:
                if node.name.casefold() in spelled[name]:
                    read[name].add(spelled[name][node.name.casefold()])
                else:
                    every(name)  # not a column of it: a field of its row, say
            elif node.table:  # no such table here: a struct column's field (s.a)
                by_name(node.table)
                by_name(node.name)
            else:
                whole = table_of(_source(scope, node.name))
                if whole is not None:  # a table's name as a column: its whole row
                    every(whole)
                else:
                    by_name(node.name)
    return {n: sorted(cols) for n, cols in read.items()}


def _source(scope: Scope, name: str) -> object:
    """What ``name`` refers to in ``scope`` or an enclosing one (a correlated
    subquery names the outer query's tables)."""
    at: Scope | None = scope
    while at is not None:
        if name in at.sources:
            return at.sources[name]
        at = at.parent
    return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
