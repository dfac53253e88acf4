"""The example graph remembers across threads, through a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

from strata_client import Client

from .conftest import Server

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "remember_across_threads.py"
README = Path(__file__).resolve().parent.parent / "README.md"


def test_example_graph_remembers_across_threads(server: Server) -> None:
    root = f"project/demo-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, STRATA_URL=server.url, STRATA_TOKEN=server.admin, STRATA_ROOT=root, DEMO_USER="ada")
    out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        "[thread-1] remember my favourite colour is teal -> Noted: my favourite colour is teal",
        "[thread-2] what is my favourite colour? -> You told me: my favourite colour is teal",
        "[thread-3] where do I live? -> I don't know that yet.",
    ]
    with Client(server.url, server.admin) as c:
        [m] = c.list(view=[f"{root}/**"])
    assert m.scope == f"{root}/users/ada/memories" and m.payload == {"text": "my favourite colour is teal"}


def test_example_runs_with_the_token_the_readme_makes(server: Server) -> None:
    """Regression (issue 56): the example wrote `project/demo` by default,
    and the README's token covers `project/acme`: a 403."""
    [scope] = re.findall(r"strata token new --name agent --scope (\S+)", README.read_text())
    assert scope == "project/acme"
    env = {k: v for k, v in os.environ.items() if k != "STRATA_ROOT"}
    env.update(STRATA_URL=server.url, STRATA_TOKEN=server.agent, DEMO_USER="ana")
    out = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == (
        "[thread-2] what is my favourite colour? -> You told me: my favourite colour is teal"
    )
    with Client(server.url, server.agent) as c:
        [m] = c.list(view=["project/acme/users/ana/**"])
    assert m.scope == "project/acme/users/ana/memories"
