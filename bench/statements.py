"""Per-statement CPU of SQLAlchemy Core ``Connection.execute`` against the same compiled SQL on the raw sqlite3
cursor, for the statement shapes of the log store's hot path (an insert, a keyed range read).

This is the measured reason the SQLite backend keeps its hot path as Core-compiled SQL text run on the raw
cursor (docs/decisions/0040-hot-statements-run-as-text.md). Prints µs per statement (CPU time, median of rounds) and the ratio.

    .venv/bin/python bench/statements.py [--n 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import sqlalchemy as sa


def build() -> tuple[sa.Engine, sa.Table]:
    engine = sa.create_engine("sqlite://")
    table = sa.Table(
        "entries",
        sa.MetaData(),
        sa.Column("scope", sa.Text),
        sa.Column("seq", sa.Integer),
        sa.Column("body", sa.Text),
        sa.PrimaryKeyConstraint("scope", "seq"),
    )
    table.metadata.create_all(engine)
    return engine, table


def cpu_per_call(fn: Callable[[int], object], n: int) -> float:
    started = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - started) / n * 1e6


def one_round(n: int) -> dict[str, float]:
    engine, t = build()
    insert = t.insert()
    select = sa.select(t.c.body).where(t.c.scope == sa.bindparam("s"), t.c.seq > sa.bindparam("q")).limit(5)
    insert_sql = str(insert.compile(dialect=engine.dialect))
    select_sql = str(select.compile(dialect=engine.dialect))
    body = "x" * 200
    with engine.connect() as conn:
        raw = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        conn.execute(insert, [{"scope": "a", "seq": i, "body": body} for i in range(100)])
        out = {
            "core insert": cpu_per_call(lambda i: conn.execute(insert, {"scope": "b", "seq": i, "body": body}), n),
            "raw insert": cpu_per_call(lambda i: raw.execute(insert_sql, ("c", i, body)), n),
            "core select": cpu_per_call(lambda i: conn.execute(select, {"s": "a", "q": i % 90}).fetchall(), n),
            "raw select": cpu_per_call(lambda i: raw.execute(select_sql, ("a", i % 90, 5, 0)).fetchall(), n),
        }
        conn.rollback()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = [one_round(args.n) for _ in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    for kind in ("insert", "select"):
        core, raw = med[f"core {kind}"], med[f"raw {kind}"]
        print(
            f"{kind:7s} Core {core:6.1f} µs  raw cursor {raw:6.1f} µs  Core costs {core - raw:5.1f} µs more ({core / raw:.1f}×)"
        )


if __name__ == "__main__":
    main()
