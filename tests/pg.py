"""A real PostgreSQL for the tests (DESIGN §10): one fresh database per test session, emptied before each test.

Where the server comes from, in order:
1. ``DECKLOG_TEST_DATABASE_URL`` when set (used as given: the tests empty its decklog tables);
2. else the server on 127.0.0.1:5432 when it answers (trust auth, database ``test``): a database
   ``decklog_test_<pid>`` is made from a template holding the current schema (``decklog_tpl_<schema digest>``,
   made once per schema) and dropped at the end of the session;
3. else a server this session starts itself with Debian's ``initdb``/``pg_ctl`` under a temporary directory.
Without any of them the PostgreSQL tests skip with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from decklog.core.store.postgres import schema as pg

LOCAL_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def _admin_url_local() -> str | None:
    if not _answers("127.0.0.1", 5432):
        return None
    for url in (LOCAL_ADMIN, "postgresql://127.0.0.1:5432/test", "postgresql://127.0.0.1:5432/postgres"):
        try:
            with psycopg.connect(url, connect_timeout=3):
                return url
        except psycopg.Error:
            continue
    return None


def _with_db(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def _make_template(admin: str) -> str:
    """``decklog_tpl_<digest>``, holding the current schema; made once (racing sessions: the loser waits)."""
    name = f"decklog_tpl_{pg.layout_digest()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return name
        building = name + "_building"
        with contextlib.suppress(psycopg.errors.DuplicateDatabase):
            conn.execute(f'DROP DATABASE IF EXISTS "{building}_{os.getpid()}"')
            conn.execute(f'CREATE DATABASE "{building}_{os.getpid()}"')
        engine = sa.create_engine(pg.engine_url(_with_db(admin, f"{building}_{os.getpid()}")))
        try:
            with engine.begin() as c:
                pg.ensure_schema(c)
        finally:
            engine.dispose()
        try:
            conn.execute(f'ALTER DATABASE "{building}_{os.getpid()}" RENAME TO "{name}"')
        except psycopg.errors.DuplicateDatabase:  # another session finished first
            conn.execute(f'DROP DATABASE "{building}_{os.getpid()}"')
    return name


def _create_from_template(admin: str, template: str, name: str) -> None:
    deadline = time.monotonic() + 30
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        while True:
            try:
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                return
            except psycopg.errors.ObjectInUse:  # another session is copying the template right now
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _drop(admin: str, name: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def _own_server() -> Iterator[str | None]:
    """Start a throw-away server with Debian's binaries (as user ``postgres`` when we are root)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="decklog-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("runuser"):
            yield None
            return
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"], check=True, capture_output=True
        )
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-o", opts, "-w", "start", "-l", str(root / "log")],
            check=True,
            capture_output=True,
        )
    except (subprocess.CalledProcessError, OSError):
        yield None
        shutil.rmtree(root, ignore_errors=True)
        return
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    """The URL of this session's PostgreSQL database (schema made; see the module's docstring)."""
    given = os.environ.get("DECKLOG_TEST_DATABASE_URL")
    if given:
        yield given
        return
    name = f"decklog_test_{os.getpid()}"
    admin = _admin_url_local()
    with contextlib.ExitStack() as stack:
        if admin is None:
            admin = stack.enter_context(_own_server())
        if admin is None:
            unavailable(
                "no PostgreSQL: DECKLOG_TEST_DATABASE_URL is unset, 127.0.0.1:5432 does not answer, "
                "and initdb/pg_ctl could not start one"
            )
        assert admin is not None
        _create_from_template(admin, _make_template(admin), name)
        try:
            yield _with_db(admin, name)
        finally:
            _drop(admin, name)


def empty_database(url: str) -> None:
    """Remove every row of decklog's tables (the schema and its recorded version stay)."""
    tables = ", ".join(f'"{t.name}"' for t in (*pg.LOG_TABLES, *pg.INDEX_TABLES, *pg.REPLICA_TABLES))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables}")


@pytest.fixture
def pg_url(pg_session_url: str) -> str:
    """This session's database, empty (the engine's schema check runs again in every store: cheap)."""
    with psycopg.connect(pg_session_url, autocommit=True) as conn:
        conn.execute("SELECT 1")
    try:
        empty_database(pg_session_url)
    except psycopg.errors.UndefinedTable:  # a DECKLOG_TEST_DATABASE_URL without the schema yet
        engine = pg.make_engine(pg_session_url)
        try:
            with engine.begin() as c:
                pg.ensure_schema(c)
        finally:
            engine.dispose()
    return pg_session_url
