"""Shared fixtures: the repository root, `llmgov mock-server` as a subprocess,
and `until`, which lets the event loop run until a condition holds."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]


async def until(condition: Callable[[], bool]) -> None:
    """Lets the event loop run until `condition()` holds (the clock does not move)."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition never held")


def cargo_target_dir() -> Path:
    """Where `cargo test --workspace` put the `llmgov` binary."""
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def mock_server_binary() -> Path:
    binary = cargo_target_dir() / "debug" / "llmgov"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: build it first with `cargo build -p llmgov-cli`")
    return binary


class MockServer:
    """A running `llmgov mock-server`, stopped when the fixture ends."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [str(mock_server_binary()), "mock-server", "--config", str(config), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        prefix = "llmgov mock-server listening on "
        if not line.startswith(prefix):
            self.process.kill()
            raise RuntimeError(f"mock-server did not start: {line!r}")
        self.url = line[len(prefix) :]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def mock_server_factory(tmp_path: Path) -> Iterator:
    servers: list[MockServer] = []

    def start(config_text: str) -> MockServer:
        config = tmp_path / f"mock-{len(servers)}.toml"
        config.write_text(config_text)
        server = MockServer(config)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
