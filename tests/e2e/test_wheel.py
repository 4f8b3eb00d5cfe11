"""``pip install <checkout>`` without ``-e`` gives a working ``decklog``: the wheel carries everything decklog reads
at run time (prompts, the example catalog, the sandbox's static files, the report templates), found through
importlib.resources. Built offline (``--no-build-isolation``), installed into a fresh venv whose only other
path is this venv's site-packages (the dependencies; its editable decklog is not activated), and run from ``/``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("core", "adapters", "bot", "prompts", "pyproject.toml", "setup.py", "README.md")
SHIPPED = (
    "decklog/bot/decklog.example.toml",
    "decklog/prompts/turn.md",
    "decklog/prompts/partials/role.md",
    "decklog/adapters/local/sandbox/index.html",
    "decklog/adapters/local/sandbox/sandbox.js",
    "decklog/adapters/local/sandbox/sandbox.css",
    "decklog/core/reports/templates/report.md.j2",
)


def _run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd="/", env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's ``bin`` with decklog installed from a freshly built wheel."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:  # a clean copy: the build leaves build/ and *.egg-info behind, not in the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    built = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", src, "-w", base)
    assert built.returncode == 0, built.stderr
    (wheel,) = base.glob("decklog-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert not [s for s in SHIPPED if s not in names], sorted(names)
    assert "decklog.example.toml" not in names  # only inside the bot package
    # One import namespace: nothing named core, bot, adapters or prompts at the top of site-packages.
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"decklog"}, sorted(names)
    assert "License-Expression: Apache-2.0" in metadata
    venv = base / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip())
    # The dependencies come from this venv (offline); appended to sys.path after the fresh site-packages, and not
    # as a site directory, so this venv's editable decklog (a .pth finder) stays off.
    (site / "_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel)
    assert done.returncode == 0, done.stderr
    assert "deprecat" not in (done.stdout + done.stderr).lower()
    return venv / "bin"


def _env(data: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))}
    keep.pop("PYTHONPATH", None)
    return {**keep, "DECKLOG_DATA_DIR": str(data), **extra}


def test_the_installed_packages_are_the_wheels_not_the_checkout(installed: Path) -> None:
    code = (
        "import decklog.bot as bot; from decklog.bot.settings import Settings; "
        "from decklog.core.prompts import PromptLibrary; "
        "print(bot.__file__); print(Settings().resolved_config_path); print(PromptLibrary.shipped().root)"
    )
    shown = _run(installed / "python", "-c", code, env=_env(Path("/nonexistent")))
    assert shown.returncode == 0, shown.stderr
    venv = installed.parent.resolve()
    paths = [Path(line).resolve() for line in shown.stdout.splitlines()]
    assert all(venv in p.parents for p in paths), (paths, venv)
    assert paths[1].name == "decklog.example.toml" and paths[1].is_file()


def test_declare_and_timeline_from_slash(installed: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "data")
    declared = _run(installed / "decklog", "declare", "--title", "Wheel check", "--severity", "2", env=env)
    assert declared.returncode == 0, declared.stderr
    scope = declared.stdout.splitlines()[0].strip()
    assert scope.startswith("incident/")
    timeline = _run(installed / "decklog", "timeline", scope, "--json", env=env)
    assert timeline.returncode == 0, timeline.stderr
    entries = json.loads(timeline.stdout)
    assert entries and entries[0]["payload"]["title"] == "Wheel check"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_in_sandbox_mode_answers_healthz_and_the_page(installed: Path, tmp_path: Path) -> None:
    port = _free_port()
    env = _env(tmp_path / "data", DECKLOG_HOST="127.0.0.1", DECKLOG_PORT=str(port))
    log = (tmp_path / "serve.log").open("w+")
    proc = subprocess.Popen([installed / "decklog", "serve"], cwd="/", env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, health = time.monotonic() + 60, None
        while health is None:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    health = json.loads(r.read())
            except OSError:
                time.sleep(0.1)  # polling with a deadline: the server is starting
        assert health["status"] == "ok" and health["slack"] == "sandbox"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert 'name="decklog-sandbox-token"' in r.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sandbox/assets/sandbox.js", timeout=5) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
