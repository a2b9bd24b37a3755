"""A throwaway PostgreSQL server for tests: initdb into a temporary directory, postgres on a free loopback
port, stopped (and its files removed) at the end.

initdb refuses to run as root, so as root the server runs as the `postgres` user (Debian's postgresql
package creates it) through runuser; as anyone else it runs as that user. The binaries come from
$KFACTORY_PG_BIN, else the directory of `initdb` on PATH, else Debian's /usr/lib/postgresql/<newest>/bin.
Each test gets a database of its own (`create_database`), so tests never see each other's rows.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

USER = "kfactory"  # the superuser initdb creates; trust authentication on the loopback only
SERVER_ACCOUNT = "postgres"  # who runs the server when the tests run as root
START_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it
START_TIMEOUT_S = 30


class Unavailable(Exception):
    """No PostgreSQL server can start here; the message says why and what to install."""


@dataclass
class PgServer:
    bindir: Path
    root: Path  # temporary directory holding the data directory, the socket and the log
    port: int
    account: str | None  # the account the server runs as (None: the current user)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = "kf_" + uuid.uuid4().hex[:16]
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        _run(self, [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def find_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    configured = os.environ.get("KFACTORY_PG_BIN")
    if configured:
        return Path(configured)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)], reverse=True)
    return versions[0].parent if versions else None


def start() -> PgServer:
    """Start a server, or raise Unavailable saying why none can start here."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("the Python driver psycopg is not installed (pip install 'psycopg[binary]')") from None
    bindir = find_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        raise Unavailable("no PostgreSQL server binaries (initdb) found; install Debian's postgresql "
                          "(scripts/setup.sh does as root) or set KFACTORY_PG_BIN")
    account = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_ACCOUNT)
        except KeyError:
            raise Unavailable(f"running as root and there is no {SERVER_ACCOUNT!r} user to run the server "
                              "(initdb refuses root); install Debian's postgresql, which creates it") from None
        if shutil.which("runuser") is None:
            raise Unavailable("running as root without runuser to start the server as another user")
        account = SERVER_ACCOUNT
    # A short path under /tmp: the socket path must stay under ~100 bytes, and the server's account
    # must be able to reach it (pytest's own temporary directories are private to root).
    root = Path(tempfile.mkdtemp(prefix="kfpg-", dir="/tmp"))
    if account is not None:
        entry = pwd.getpwnam(account)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PgServer(bindir, root, 0, account)
    try:
        _initdb(server)
        last = ""
        for _ in range(START_ATTEMPTS):
            server.port = _free_port()
            started = _run(server, [str(bindir / "pg_ctl"), "-D", str(server.datadir), "-l", str(server.log), "-w",
                                    "-t", str(START_TIMEOUT_S), "-o", _server_options(server), "start"], check=False)
            if started.returncode == 0:
                return server
            last = _tail(server.log) or started.stderr.strip()
        raise Unavailable(f"postgres did not start: {last}")
    except Unavailable:
        shutil.rmtree(root, ignore_errors=True)
        raise
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise Unavailable(f"postgres did not start: {exc}") from None


def _initdb(server: PgServer) -> None:
    result = _run(server, [str(server.bindir / "initdb"), "-D", str(server.datadir), "-U", USER, "-A", "trust",
                           "-E", "UTF8", "--no-sync", "--no-instructions"], check=False)
    if result.returncode != 0:
        raise Unavailable(f"initdb failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}")


def _server_options(server: PgServer) -> str:
    # Loopback TCP only, a socket in our own directory, and no durability: the data is thrown away.
    return (f"-p {server.port} -k {server.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")


def _run(server: PgServer, argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
    if server.account is not None:
        argv = ["runuser", "-u", server.account, "--", *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=check, cwd=server.root, timeout=120)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""

