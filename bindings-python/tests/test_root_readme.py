"""The repository README's Python quick start, run as a reader runs it: the
block saved to a file and run by Python against `llmgov mock-server`, whose
address it reads from `OPENAI_BASE_URL` as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import REPO


def quick_start() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start (Python)", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_quick_start_installs_what_it_imports() -> None:
    block = quick_start()
    assert "pip install './bindings-python[httpx]' openai" in block
    assert "asyncio.run(main())" in block


def test_the_quick_start_runs_against_the_mock_server(mock_server_factory: Any, tmp_path: Path) -> None:
    server = mock_server_factory((REPO / "cli" / "mock" / "openai-tier1.toml").read_text())
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start())
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENAI_")}
    env["OPENAI_BASE_URL"] = f"{server.url}/v1"
    # Outside the repository, so that `import llmgov` is the installed package.
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    # The answer came from the mock through the governed transport.
    assert re.fullmatch(r"\d+ tokens: \S.*", run.stdout.strip()), run.stdout
