"""SQL text that parses a column's trimmed text as its type (NULL where it does not parse), and the rule that
decides a type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column


INTEGER_TEXT = r"^[+-]?[0-9]+$"   # a whole number as written: no decimal point, no exponent


_NUMBER_START = r"^([-+.0-9]|(?i)[+-]?(inf|nan))"   # what a number's text can begin with


_NUMBER_CODES = (43, 45, 46, *range(48, 58))   # + - . 0-9: the first character of most numbers


_WORD_CODES = (73, 78, 105, 110)   # I N i n: Infinity, NaN


_TRUE, _FALSE = ("true", "1"), ("false", "0")


ESCAPED_QUOTE = '\\"'   # a quote escaped by a backslash, as Spark's CSV writer writes one


def parse(name: str, kind: str) -> Column:
    """Column ``name`` (trimmed text) as ``kind``: :func:`parse_sql` as a Column."""
    from pyspark.sql import functions as F

    return F.expr(parse_sql(name, kind))


def parse_sql(name: str, kind: str) -> str:
    """Column ``name`` (trimmed text) as ``kind`` ('double', 'long' or 'boolean'), NULL where the text
    does not parse: a plain cast fails the whole job on Spark 4, whose ANSI mode is on by default.
    A ``long`` is read as its text says: ``127.0`` and ``1e3`` are the whole numbers 127 and 1000,
    ``127.5`` does not parse; a ``boolean`` is 1 for true/1 and 0 for false/0 (any case).

    Only text that can be a number reaches Spark's ``try_cast``: a cast that fails throws and catches an
    exception inside the JVM (about 5 us a cell here), so a category column cast as double, or pandas'
    ``127.0`` cast as long, cost more than the rest of the pass. The expressions are SQL text: built
    from Column objects, each part a call into the JVM, they took seconds of a prepare's driver time."""
    text = sql_name(name)
    if kind == "boolean":
        return (f"CASE WHEN lower({text}) IN {sql_tuple(_TRUE)} THEN 1L "
                f"WHEN lower({text}) IN {sql_tuple(_FALSE)} THEN 0L END")
    number = f"CASE WHEN {_maybe_number_sql(text)} THEN try_cast({text} AS double) END"
    if kind == "long":
        return (f"CASE WHEN {text} RLIKE {sql_text(INTEGER_TEXT)} THEN try_cast({text} AS long) "
                f"WHEN ({number}) = floor({number}) AND abs({number}) < {2.0 ** 63!r}D "
                f"THEN cast(({number}) AS long) END")
    return number


def _maybe_number_sql(text: str) -> str:
    """False for text that cannot parse as a number: not starting with a digit, sign or point, and not one
    of the words Spark reads as a number (Infinity, NaN). The first character's code decides, and a
    pattern only for text starting with i or n: a pattern on every cell took a quarter of the typed pass."""
    return (f"(ascii({text}) IN {sql_tuple(_NUMBER_CODES)} OR (ascii({text}) IN {sql_tuple(_WORD_CODES)} "
            f"AND {text} RLIKE {sql_text(_NUMBER_START)}))")


def sql_name(name: str) -> str:
    """A column name quoted for SQL text."""
    return "`" + name.replace("`", "``") + "`"


def sql_text(value: str) -> str:
    """A string literal for SQL text.

    >>> print(sql_text("a'b\\\\c"))
    'a\\'b\\\\c'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_tuple(values: Sequence[Any]) -> str:
    return "(" + ", ".join(sql_text(v) if isinstance(v, str) else str(v) for v in values) + ")"


def decide(present: int, numeric: int, whole: int, boolean: int) -> str:
    """A column's type from the counts of its values: ``boolean`` when every value is true/false,
    numeric when most values parse as numbers (the others are then rejected), ``long`` when every such
    number is written as a whole number without a decimal point or exponent, else ``double``."""
    if present and boolean == present:
        return "boolean"
    if present and numeric * 2 > present:
        return "long" if whole == numeric else "double"
    return "string"


def parse_strict(name: str, kind: str) -> str:
    """Column ``name`` as ``kind`` (SQL text), NULL unless its text is written as that type: ``127.0`` is
    not a ``long`` and ``1`` not a ``boolean``. A type guessed from the first rows is checked so, on every row."""
    text = sql_name(name)
    if kind == "long":
        return f"try_cast({text} AS long)"   # whole numbers as written: no point, no exponent
    if kind == "boolean":
        return f"CASE WHEN lower({text}) = 'true' THEN 1L WHEN lower({text}) = 'false' THEN 0L END"
    return parse_sql(name, kind)
