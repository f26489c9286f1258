"""Read an index file back as plain data, to compare two indexes."""

from pathlib import Path


def index_contents(index: Path) -> dict:
    import sqlean  # the same bundled SQLite the product uses when sqlite3 cannot load extensions

    conn = sqlean.connect(str(index))
    conn.enable_load_extension(True)
    import sqlite_vec

    sqlite_vec.load(conn)
    chunks = sorted(conn.execute("SELECT f.path, c.ord, c.text, c.start_line, c.end_line, c.content_hash "
                                 "FROM chunks c JOIN files f ON f.id = c.file_id"))
    files = sorted(conn.execute("SELECT path, content_hash, chunk_count FROM files"))
    # Counts of chunks, FTS rows and chunks with vectors (a vector's rowid is chunk id << 5 | window).
    counts = [conn.execute(sql).fetchone()[0] for sql in (
        "SELECT COUNT(*) FROM chunks", "SELECT COUNT(*) FROM chunks_fts_docsize", "SELECT COUNT(DISTINCT rowid >> 5) FROM chunk_vec")]
    orphans = conn.execute("SELECT COUNT(*) FROM chunk_vec WHERE rowid >> 5 NOT IN (SELECT id FROM chunks)").fetchone()[0]
    conn.close()
    return {"chunks": chunks, "files": files, "counts": counts, "orphans": orphans}
