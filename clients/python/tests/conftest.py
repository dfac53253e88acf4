"""A real `strata serve` on 127.0.0.1 for the whole session: a fresh
database and a config with tokens made by `strata token new`. The binary
comes from `STRATA_BIN` (else `strata` on PATH); without one the tests are
skipped, except under `CI`, where that is a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata_client import AsyncClient, Client

MAX_BATCH = 50


@dataclass
class Server:
    url: str
    admin: str  # read_write over project, global, session, task
    a: str  # read_write over project/a
    a_read: str  # read over project/a
    agent: str  # read_write over project/acme: the token clients/python/README.md makes
    binary: str
    home: Path


def _binary() -> str:
    path = os.environ.get("STRATA_BIN") or shutil.which("strata")
    if path and os.access(path, os.X_OK):
        return path
    why = f"no strata binary (STRATA_BIN={os.environ.get('STRATA_BIN')!r})"
    if os.environ.get("CI"):
        pytest.fail(f"{why}: CI must test against a real server", pytrace=False)
    pytest.skip(why)


def _token(binary: str, env: dict[str, str], name: str, scopes: list[str], access: str) -> tuple[str, str]:
    args = [binary, "--json", "token", "new", "--name", name, "--access", access]
    for s in scopes:
        args += ["--scope", s]
    out = json.loads(subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout)
    return out["token"], out["config"]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary = _binary()
    home = tmp_path_factory.mktemp("strata")
    # No embedding model in reach: recall is BM25 only, the same everywhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"), HOME=str(home))
    admin, c1 = _token(binary, env, "admin", ["project", "global", "session", "task"], "read_write")
    a, c2 = _token(binary, env, "a", ["project/a"], "read_write")
    a_read, c3 = _token(binary, env, "a-read", ["project/a"], "read")
    agent, c4 = _token(binary, env, "agent", ["project/acme"], "read_write")
    config = home / "strata.toml"
    config.write_text(f"[server.limits]\nmax_batch = {MAX_BATCH}\n\n{c1}\n{c2}\n{c3}\n{c4}")
    proc = subprocess.Popen(
        [binary, "serve", "--db", str(home / "strata.db"), "--config", str(config), "--listen", "127.0.0.1:0"],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    url = None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].split()[0]
            break
    if url is None:
        proc.wait(timeout=10)
        pytest.fail(f"strata serve exited ({proc.returncode}):\n{''.join(lines)}", pytrace=False)
    # Keep draining stderr so the server never blocks on it.
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        yield Server(url=url, admin=admin, a=a, a_read=a_read, agent=agent, binary=binary, home=home)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, server.admin) as c:
        yield c


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url, server.admin) as c:
        yield c


@pytest.fixture
def scope() -> str:
    """A scope no other test writes to."""
    return f"project/t-{uuid.uuid4().hex[:10]}"
