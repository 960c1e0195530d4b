"""A query's SQL read and checked (pure): parsed with sqlglot as DuckDB's
dialect, one SELECT reading catalog tables only, its table and column names
known, and whether its answer changes from run to run (``volatile``).
Errors are one line naming where.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError, TokenError

from warehouse.errors import NotFoundError, UsageError
from warehouse.query.tables import TableMeta

__all__ = [
    "DIALECT",
    "MAX_SQL",
    "check_names",
    "parse",
    "table_names",
    "tables_have_columns",
    "volatile",
]

DIALECT = "duckdb"
MAX_SQL = 32768  # characters of SQL

# sqlglot warns on stderr of SQL it cannot parse fully ("falling back to
# parsing as a 'Command'"); such SQL is refused here in one line anyway.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def _plain_words(desc: str) -> str:
    """sqlglot's description without its Python reprs: ``<class
    '...expressions.query.Where'>`` is ``Where``, a token its text."""
    desc = re.sub(r"<class '[\w.]*\.(\w+)'>", r"\1", desc)
    desc = re.sub(r"<Token token_type: TokenType\.SENTINEL, [^>]*>", "the end", desc)
    return re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: [^>]*>", r"'\1'", desc)


def parse(sql: str) -> Any:
    """The one statement of ``sql``; errors name line and column."""
    if len(sql) > MAX_SQL:
        # The plan travels in each step's environment (at most 128 KiB a variable).
        raise UsageError(f"query: the SQL is over {MAX_SQL} characters")
    try:
        statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    except RecursionError:
        raise UsageError("query: the SQL is nested too deeply") from None
    except ParseError as e:
        where = e.errors[0] if e.errors else {}
        at = f" at line {where.get('line')}, column {where.get('col')}" if where else ""
        desc = where.get("description") or str(e).splitlines()[0]
        raise UsageError(f"query: {_plain_words(desc)}{at}") from None
    except TokenError as e:  # an unterminated string or quoted name
        found = re.search(r"Missing (.+) from (\d+):(\d+)", str(e.__cause__ or ""))
        if found:
            quote, line, col = found.groups()
            raise UsageError(
                f"query: missing {quote} (opened at line {line}, column {int(col) + 1})"
            ) from None
        raise UsageError(f"query: {str(e).splitlines()[0]}") from None
    except SqlglotError as e:
        raise UsageError(f"query: {str(e).splitlines()[0]}") from None
    if len(statements) != 1:
        raise UsageError("query: give exactly one statement")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise UsageError("query: only a SELECT can run")
    for table in tree.find_all(exp.Table):
        # A table function (read_csv, read_text, glob, range...) reads no
        # catalog table; a step's DuckDB could not read its files anyway.
        if not isinstance(table.this, exp.Identifier):
            raise UsageError(
                f"query: only tables named in the catalog can be read, not {table.sql(DIALECT)}"
            )
    return tree


# What makes a query's answer differ from run to run over the same tables:
# such a query is run again each time, never answered by an earlier job's
# result (a job is otherwise reused when its function, input and parameters
# are the same).
_VOLATILE_KINDS: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, kind)
    for kind in (
        "Rand",
        "Randn",
        "Uuid",
        "CurrentDate",
        "CurrentTime",
        "CurrentTimestamp",
        "CurrentDatetime",
        "Localtime",
        "Localtimestamp",
    )
    if hasattr(exp, kind)
)
_VOLATILE_NAMES = frozenset(
    {
        "random",
        "setseed",
        "uuid",
        "uuidv4",
        "uuidv7",
        "gen_random_uuid",
        "now",
        "today",
        "get_current_time",
        "get_current_timestamp",
        "transaction_timestamp",
        "current_localtime",
        "current_localtimestamp",
        "nextval",
        "currval",
        "txid_current",
        "current_transaction_id",
        "current_query_id",
        "current_connection_id",
    }
)


def volatile(tree: exp.Expression) -> str | None:
    """The first thing in ``tree`` whose value changes from run to run (a
    call such as ``random()`` or ``now()``, a sample without a seed), or None."""
    for node in tree.walk():
        if isinstance(node, _VOLATILE_KINDS):
            return node.sql(DIALECT)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _VOLATILE_NAMES:
            return node.sql(DIALECT)
        # No seed: None, or False for DuckDB's "USING SAMPLE 10% (bernoulli)".
        if isinstance(node, exp.TableSample) and not node.args.get("seed"):
            return node.sql(DIALECT)
    return None


def table_names(tree: exp.Expression) -> list[str]:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    names = [t.name for t in tree.find_all(exp.Table) if t.name not in ctes]
    return list(dict.fromkeys(names))


def check_names(tree: exp.Expression, tables: Mapping[str, TableMeta]) -> None:
    for name in table_names(tree):
        if name not in tables:
            raise NotFoundError(f"query: unknown table {name!r}")
    # DuckDB's identifiers are not case-sensitive (quoted or not): neither is this.
    known = {c.casefold() for t in tables.values() for c, _ in t.columns}
    known |= {a.alias.casefold() for a in tree.find_all(exp.Alias)}
    known |= {c.alias_or_name.casefold() for c in tree.find_all(exp.CTE)}
    known |= {t.name.casefold() for t in tree.find_all(exp.TableAlias)}
    known |= {t.name.casefold() for t in tree.find_all(exp.Table)}  # a table's row, as a column
    known |= {c.name.casefold() for t in tree.find_all(exp.TableAlias) for c in t.columns}
    for column in tree.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue  # t.*: every column of t
        name = column.name.casefold()
        if name and name not in known and tables_have_columns(tables):
            raise NotFoundError(f"query: unknown column {column.name!r}")


def tables_have_columns(tables: Mapping[str, TableMeta]) -> bool:
    return all(t.columns for t in tables.values())
