"""The package as a user gets it: the sdist and the wheel built from a clean copy of the checkout
(`python -m build`), what each archive holds, and the wheel installed into a fresh virtual
environment without the dev extra, whose `relay` works from an empty directory: `--version`, the
demo, the mock's help and a replay of the demo's recording against the packaged example tools.

Slow (about a minute: two isolated builds and one install from the package index or pip's cache),
so marked `packaging`; `pytest -m packaging` runs these alone.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest

from relay import __version__
from tests.packaging.checkout import clean_copy, fresh_shell_environment

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

DIST = "realtime_relay"          # the distribution name, normalised as in archive names
PIP = ("-m", "pip", "--disable-pip-version-check")


@dataclass
class Built:
    source: Path                  # the clean copy the archives were built from
    source_files: list[str]
    sdist: Path
    wheel: Path


def run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{shlex.join(command)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    source = tmp_path_factory.mktemp("checkout")
    names = clean_copy(source)
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(source)], cwd=source)
    [sdist] = dist.glob("*.tar.gz")
    [wheel] = dist.glob("*.whl")
    return Built(source, names, sdist, wheel)


@dataclass
class Installed:
    venv: Path
    workdir: Path                 # an empty directory, far from any checkout
    env: dict[str, str]

    def relay(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run([str(self.venv / "bin" / "relay"), *args], cwd=self.workdir, env=self.env, timeout=timeout)

    def python(self, code: str) -> str:
        return run([str(self.venv / "bin" / "python"), "-c", code], cwd=self.workdir, env=self.env).stdout.strip()


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    venv = tmp_path_factory.mktemp("venv")
    # From inside a virtual environment, `-m venv` makes the new one from the base interpreter.
    run([sys.executable, "-m", "venv", str(venv)], cwd=venv)
    # The index (or pip's cache, which these flags leave on) provides the runtime dependencies.
    run([str(venv / "bin" / "python"), *PIP, "install", "--quiet", "--prefer-binary", str(built.wheel)], cwd=venv)
    workdir = tmp_path_factory.mktemp("empty")
    env = fresh_shell_environment()
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    return Installed(venv, workdir, env)


def test_the_archives_are_named_after_the_distribution_and_the_version(built: Built) -> None:
    assert built.sdist.name == f"{DIST}-{__version__}.tar.gz"
    # the picows transport's compiled lane (setup.py) makes the wheel one for this Python and
    # platform; where it cannot be built the wheel is pure Python
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    compiled = [name for name in zipfile.ZipFile(built.wheel).namelist()
                if name.startswith("relay/transports/_picows_lane.") and name.endswith(".so")]
    if compiled or os.environ.get("CI"):   # CI has the compiler: the extension must be there
        assert built.wheel.name.startswith(f"{DIST}-{__version__}-{python}-{python}-"), built.wheel.name
        assert len(compiled) == 1
    else:
        assert built.wheel.name == f"{DIST}-{__version__}-py3-none-any.whl"


def test_the_wheel_holds_the_package_and_its_data_but_no_tests_or_docs(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    dist_info = f"{DIST}-{__version__}.dist-info"
    assert {name.split("/")[0] for name in names} == {"relay", dist_info}
    for expected in ("relay/py.typed", "relay/examples/__init__.py", "relay/examples/tools.py",
                     "relay/examples/voice_tools.py", "relay/examples/data/orders.sql",
                     "relay/examples/data/weather.json", "relay/mock/script.py",
                     f"{dist_info}/licenses/LICENSE", f"{dist_info}/entry_points.txt"):
        assert expected in names, expected
    assert not [name for name in names if "__pycache__" in name or name.endswith((".pyc", ".c"))]
    # every file of the package directory in the checkout is in the wheel
    package_files = [name for name in built.source_files if name.startswith("relay/")]
    assert sorted(set(package_files) - set(names)) == []

    metadata = Parser().parsestr(zipfile.ZipFile(built.wheel).read(f"{dist_info}/METADATA").decode())
    assert metadata["Name"] == "realtime-relay" and metadata["Version"] == __version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.11"
    assert "Programming Language :: Python :: 3.13" in metadata.get_all("Classifier")
    assert any(url.startswith("Changelog, ") for url in metadata.get_all("Project-URL"))
    requirements = metadata.get_all("Requires-Dist")
    assert [r for r in requirements if "extra ==" not in r] == ["websockets<18,>=14", "pydantic<3,>=2.6",
                                                                "anyio<5,>=4.4", "starlette<2,>=0.40",
                                                                "uvicorn<1,>=0.35", "httpx<1,>=0.27",
                                                                "prometheus-client<1,>=0.20", "msgspec<1,>=0.19"]
    assert {r.split(";")[0] for r in requirements if 'extra == "otel"' in r} == {
        "opentelemetry-api<2,>=1.27", "opentelemetry-sdk<2,>=1.27", "opentelemetry-exporter-otlp-proto-http<2,>=1.27"}
    entry_points = zipfile.ZipFile(built.wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "relay = relay.cli:main" in entry_points
    assert "[pytest11]\nrelay = relay.offline.pytest_plugin" in entry_points


def test_the_sdist_holds_the_tests_docs_and_scripts(built: Built) -> None:
    top = f"{DIST}-{__version__}"
    names = {name.removeprefix(f"{top}/") for name in tarfile.open(built.sdist).getnames()}
    for expected in ("pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "LICENSE", "PKG-INFO",
                     "relay/examples/data/orders.sql", "relay/transports/_picows_lane.pyx"):
        assert expected in names, expected
    carried = [name for name in built.source_files
               if name.split("/")[0] in ("relay", "tests", "docs", "scripts")]
    assert sorted(set(carried) - names) == []
    assert not [name for name in names if "__pycache__" in name or name.endswith((".pyc", ".c"))]


def test_the_installed_relay_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    where = Path(installed.python("import relay; print(relay.__file__)"))
    assert where.is_relative_to(installed.venv), where
    # no dev extra: the test tools are not there
    assert installed.python("import importlib.util as u; print(u.find_spec('pytest'))") == "None"
    assert installed.python("import importlib.metadata as m; print(m.version('realtime-relay'))") == __version__


def test_relay_version(installed: Installed) -> None:
    assert installed.relay("--version").stdout.strip() == f"relay {__version__}"


def test_relay_mock_help(installed: Installed) -> None:
    assert "--script" in installed.relay("mock", "--help").stdout


def test_relay_demo_then_the_replay_it_prints(installed: Installed) -> None:
    demo = installed.relay("demo", "--color", "never")
    for expected in ("calls get_weather", "calls search_flights", "I found 2 flights from Paris to Rome",
                     "recording: recordings/"):
        assert expected in demo.stdout, (expected, demo.stdout)
    [recording] = (installed.workdir / "recordings").glob("*.jsonl")
    [replay_line] = [line for line in demo.stdout.splitlines() if line.startswith("replay it against the tools: ")]
    command = shlex.split(replay_line.removeprefix("replay it against the tools: "))
    assert command[:2] == ["relay", "replay"] and command[-2:] == ["--tools", "relay.examples.tools"]
    assert (installed.workdir / command[2]).resolve() == recording.resolve()
    replayed = installed.relay(*command[1:])           # exit 0: no divergence
    calls = replayed.stdout.split("calls the relay ran:")[1].split("verdict:")[0]
    assert calls.count("get_weather") == 2 and calls.count("lookup_order") == 2, replayed.stdout
    assert "search_flights" in calls, replayed.stdout


def test_without_a_c_compiler_the_wheel_builds_without_the_compiled_lane(built: Built,
                                                                        tmp_path: Path) -> None:
    """The extension is optional (setup.py): a build whose compiler fails still makes the wheel,
    the same package without `_picows_lane`'s binary, whose transport then runs its Python path."""
    source, dist = tmp_path / "checkout", tmp_path / "dist"
    clean_copy(source)   # not `built.source`: its build directory holds the extension built already
    env = {**fresh_shell_environment(), "CC": "/bin/false"}
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)], cwd=source, env=env)
    [wheel] = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [name for name in names if name.endswith(".so")]
    with_extension = {name for name in zipfile.ZipFile(built.wheel).namelist() if not name.endswith(".so")}
    assert {name for name in names if ".dist-info/" not in name} == {
        name for name in with_extension if ".dist-info/" not in name}
