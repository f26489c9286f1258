"""Roles on one PostgreSQL server do not trust each other (docs/team.md, "Roles"): an attacker's
role with the CREATE right every teammate has tries to run code as the victim, squat her index's
schema, read or clear her index; a team role shares indexes by design; a read-only member reads.
Real roles on the embedded server; each test makes its own and drops them."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from hermes_kb.agent.knowledgebase.index import pg_store
from hermes_kb.agent.knowledgebase.index.pg_store import PgIndexStore
from hermes_kb.agent.knowledgebase.service import KnowledgebaseError
from hermes_kb.agent.knowledgebase.index.contract import StoreError

from ..conftest import StubEmbedder
from .test_postgres_backend import NOTES, host

pytestmark = pytest.mark.integration
_suffix = itertools.count()
REFUSED = (StoreError, KnowledgebaseError)


@pytest.fixture
def roles(postgres_database):
    """alice (the victim), bob (a teammate turned attacker), carol; each may CREATE in the database."""
    import psycopg

    tag = f"{os.getpid()}_{next(_suffix)}"
    names = {who: f"{who}_{tag}" for who in ("alice", "bob", "carol", "team")}
    server = postgres_database.split("@", 1)[1]
    database = server.rsplit("/", 1)[1]
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for who, role in names.items():
            admin.execute(f"CREATE ROLE {role} {'NOLOGIN' if who == 'team' else 'LOGIN'} PASSWORD 'pw'")
            admin.execute(f"GRANT CREATE, CONNECT ON DATABASE {database} TO {role}")
    urls = {who: f"postgresql://{role}:pw@{server}" for who, role in names.items()}
    yield names, urls
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        for role in names.values():
            admin.execute(f"DROP OWNED BY {role} CASCADE")
        for role in names.values():
            admin.execute(f"DROP ROLE {role}")


def _as(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _schema_of(kb, docs: Path) -> str:
    [directory] = [d for d in kb.config.directories if d.path == docs.resolve()]
    return kb.index_path(directory).name


def test_a_shadowing_operator_in_a_schema_named_after_the_victim_never_runs(tree, tmp_path, roles):
    """Bob creates schema `alice` (first on her default search_path) with his own `<=>` and `vector`
    cast that copy what they are given to a table he reads. Alice indexes and searches, from a machine
    with no local copies too, and straight on the server's operators: nothing reaches his table."""
    names, urls = roles
    docs = tree(NOTES)
    with _as(urls["bob"]) as bob:
        bob.execute(f"CREATE SCHEMA {names['alice']}")
        bob.execute(f"GRANT USAGE ON SCHEMA {names['alice']} TO PUBLIC")
        bob.execute(f"CREATE TABLE {names['alice']}.loot(what text)")
        bob.execute(f"GRANT INSERT ON {names['alice']}.loot TO PUBLIC")
        bob.execute(f"""CREATE FUNCTION {names['alice']}.steal(a public.vector, b public.vector) RETURNS float8
                        LANGUAGE sql AS $$ INSERT INTO {names['alice']}.loot VALUES (current_user || ':' || a::text)
                        RETURNING 0.5::float8 $$""")
        bob.execute(f"CREATE OPERATOR {names['alice']}.<=> (LEFTARG = public.vector, RIGHTARG = public.vector, "
                    f"FUNCTION = {names['alice']}.steal)")
        bob.execute(f"CREATE FUNCTION {names['alice']}.to_tsvector(regconfig, text) RETURNS tsvector LANGUAGE sql "
                    f"AS $$ INSERT INTO {names['alice']}.loot VALUES ('tsv') RETURNING ''::tsvector $$")
    alice = host(tmp_path / "laptop", urls["alice"], docs)
    [summary] = alice.index()
    assert summary.error is None and summary.added == len(NOTES)
    elsewhere = host(tmp_path / "desktop", urls["alice"], docs)  # no vector or keyword copy on this machine
    for kb in (alice, elsewhere):
        for mode in ("vector", "hybrid", "keyword"):
            assert kb.search("vitamin deficiency", k=1, mode=mode).hits[0].path == "vitamin.md"
    conn = pg_store.connect(urls["alice"])
    try:
        assert conn.execute("SHOW search_path").fetchone()[0] == pg_store.SAFE_SEARCH_PATH
        store = PgIndexStore(conn, _schema_of(alice, docs), tmp_path / "x", create=False)
        query = StubEmbedder().embed_query("vitamin deficiency")
        assert store.knn(query, 3) and store.keyword(["vitamin"], 3)
    finally:
        conn.close()
    with _as(urls["bob"]) as bob:
        assert bob.execute(f"SELECT count(*) FROM {names['alice']}.loot").fetchone()[0] == 0


def test_a_squatted_schema_is_refused_before_anything_is_read_or_written(tree, tmp_path, roles):
    """Bob pre-creates the schema alice's folder maps to, with the project's own DDL, plants a file in
    it and grants her everything: her index and search refuse it in one sentence and write nothing."""
    names, urls = roles
    docs = tree(NOTES)
    alice = host(tmp_path / "laptop", urls["alice"], docs)
    schema = _schema_of(alice, docs)
    conn = pg_store.connect(urls["bob"])
    try:
        squat = PgIndexStore(conn, schema, tmp_path / "bob" / schema, create=True, name=docs.name)
        squat.set_meta(root=str(docs.resolve()))
        squat.write_file("planted.md", 1, 1, "h", "markdown", [], None)
        conn.execute(f'GRANT ALL ON SCHEMA "{schema}" TO {names["alice"]}')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA "{schema}" TO {names["alice"]}')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA "{schema}" TO {names["alice"]}')
    finally:
        conn.close()
    [summary] = alice.index()
    assert summary.error and f"belongs to the role {names['bob']}" in summary.error
    with pytest.raises(REFUSED, match=f"belongs to the role {names['bob']}"):
        alice.search("vitamin deficiency")
    with _as(urls["bob"]) as bob:
        assert bob.execute(f'SELECT path FROM "{schema}".files').fetchall() == [("planted.md",)]
        assert bob.execute(f'SELECT count(*) FROM "{schema}".chunks').fetchone()[0] == 0


def test_another_role_can_neither_read_nor_clear_an_index_it_was_not_given(tree, tmp_path, roles):
    names, urls = roles
    docs = tree(NOTES)
    alice = host(tmp_path / "laptop", urls["alice"], docs)
    alice.index()
    bob = host(tmp_path / "bob", urls["bob"], docs)
    for attempt in (lambda: bob.search("vitamin"), lambda: bob.clear(docs.name), bob.index):
        try:
            result = attempt()
        except REFUSED as exc:
            assert "Traceback" not in str(exc)
        else:  # index reports per directory
            assert all(summary.error for summary in result)
    assert alice.search("vitamin deficiency", k=1).hits[0].path == "vitamin.md"


def test_no_role_that_may_not_write_an_index_can_hold_its_runs_back(tree, tmp_path, roles):
    """The writer lock was an advisory lock keyed by the public schema name: bob, any role that could
    connect, held it and alice's `hermes kb index` waited for as long as he liked. Now it is a row lock
    that needs the right to write the index: bob's old key changes nothing, and neither he nor carol,
    a reader she granted, can take the lock or make a run wait."""
    import hashlib

    import psycopg

    names, urls = roles
    docs = tree(NOTES)
    alice = host(tmp_path / "laptop", urls["alice"], docs)
    schema = pg_store.schema_name(alice.config.directories[0].resolved_index_path(alice.hermes_home).stem, docs.name)
    old_key = int.from_bytes(hashlib.blake2b(schema.encode(), digest_size=8).digest(), "big", signed=True)
    with _as(urls["bob"]) as bob:
        bob.execute("SELECT pg_advisory_lock(%s)", (old_key,))
        [summary] = alice.index(wait=False)  # the first run, which makes the schema
        assert summary.error is None and summary.added == len(NOTES)
        with _as(urls["alice"]) as conn:
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {names["carol"]}')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {names["carol"]}')
        with _as(urls["carol"]) as carol:
            for intruder in (bob, carol):
                with pytest.raises(StoreError, match="may not write the index of notes; nothing was changed"):
                    with pg_store.writer_lock(intruder, schema, "notes", wait=False):
                        pass
                assert not pg_store.writer_held(intruder, schema)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor the table itself, another way in
                with carol.transaction():
                    carol.execute(f'LOCK TABLE "{schema}".writer IN ROW SHARE MODE')
            (docs / "extra.md").write_text("# Extra\n\nA note about the harbour crane.\n")
            [summary] = alice.index(wait=False)
            assert summary.error is None and summary.added == 1
            assert alice.status()[0]["indexing"] is False
            assert carol.execute(f'SELECT count(*) FROM "{schema}".files').fetchone()[0] == len(NOTES) + 1
    assert alice.clear(docs.name) == [docs.name]


def test_a_team_role_shares_an_index_and_a_read_only_member_only_reads(tree, tmp_path, roles, postgres_database):
    """By design: alice writes as the team role (options=-c role=...), so the team owns the schema;
    bob, a member, updates it; carol, a member without inherited rights and granted SELECT, searches
    it, and her index and clear are one sentence each and change nothing."""
    import psycopg

    names, urls = roles
    with psycopg.connect(postgres_database, autocommit=True) as admin:
        admin.execute(f"GRANT {names['team']} TO {names['alice']}, {names['bob']}")
        admin.execute(f"GRANT {names['team']} TO {names['carol']} WITH INHERIT FALSE")
    as_team = "?options=-c%20role%3D" + names["team"]
    docs = tree(NOTES)
    alice = host(tmp_path / "alice", urls["alice"] + as_team, docs)
    [summary] = alice.index()
    assert summary.error is None
    schema = _schema_of(alice, docs)
    with _as(urls["alice"] + as_team) as conn:
        assert conn.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = %s",
                            (schema,)).fetchone()[0] == names["team"]
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO {names["carol"]}')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {names["carol"]}')
    (docs / "extra.md").write_text("# Extra\n\nThe team's shared note about the harbour crane.\n")
    bob = host(tmp_path / "bob", urls["bob"] + as_team, docs)
    [summary] = bob.index()
    assert summary.error is None and summary.added == 1
    carol = host(tmp_path / "carol", urls["carol"], docs)
    assert carol.search("harbour crane", k=1).hits[0].path == "extra.md"
    (docs / "more.md").write_text("# More\n\nCarol may not add this.\n")
    [summary] = carol.index()
    assert summary.error and "Traceback" not in summary.error
    with pytest.raises(REFUSED):
        carol.clear(docs.name)
    assert alice.search("harbour crane", k=1).hits[0].path == "extra.md"
    assert "more.md" not in {hit.path for hit in alice.search("Carol may not add", mode="keyword").hits}


HOSTILE = {
    "nul-late.txt": "plain start\n" + "x" * 9000 + "\x00 after the sniff window\n",
    "nul-md.md": "# Title\n\n" + "y" * 9000 + "\x00\x00 two NULs\n",
    "fine.md": "# Fine\n\nThe ordinary note is here.\n",
    "latin1.txt": "caf\xe9 cr\xe8me br\xfbl\xe9e\n",
    "controls.txt": "bell \x07 escape \x1b[31m red \x1b[0m form \x0c feed\n",
}


def test_a_hostile_folder_indexes_the_same_files_on_both_backends(tree, tmp_path, postgres_database, make_kb):
    """No byte sequence in one file fails a run: SQLite and PostgreSQL index and skip the same files."""
    docs = tree({})
    for name, text in HOSTILE.items():
        (docs / name).write_bytes(text.encode("latin-1") if name == "latin1.txt" else text.encode("utf-8"))
    (docs / "bad-utf16.txt").write_bytes(b"\xff\xfe" + "ok".encode("utf-16-le") + b"\x00\xd8\x00\x00")  # lone surrogate
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4\n\x00\x00garbage")
    sqlite_kb = make_kb(docs)
    [on_sqlite] = sqlite_kb.index()
    pg_kb = host(tmp_path / "pg", postgres_database, docs)
    [on_pg] = pg_kb.index()
    assert on_sqlite.error is None and on_pg.error is None
    assert on_sqlite.added == on_pg.added and sorted(on_sqlite.skipped) == sorted(on_pg.skipped)
    assert not set(HOSTILE) & {path for path, _ in on_pg.skipped}, on_pg.skipped
    for kb in (sqlite_kb, pg_kb):
        assert kb.search("sniff window", k=1, mode="keyword").hits[0].path == "nul-late.txt"
