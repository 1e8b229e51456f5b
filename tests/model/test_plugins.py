"""Plugins by entry point (issue 26 item 6): the built-ins register as a third party's do, and a separately
installed package (examples/plugin) adds a gate, a channel and an engine adapter (that they run in a real session
is real_engine/test_plugin_session.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest

from observatory.engines import adapter
from observatory.model.errors import ObservatoryError
from observatory.model.plugins import BUILTIN, ENGINES, GROUPS, Plugin, discover
from observatory.model.tomlfile import read_toml
from tests.support.paths import REPO
from tests.support.plugins import install_example_plugin


def _builtin(group: str) -> dict[str, str]:
    """The built-ins of GROUP: the model's BUILTIN, the engine adapters' own (engines/adapter.py)."""
    return adapter.BUILTIN if group == ENGINES else BUILTIN[group]


def _discover(group: str) -> tuple[Plugin, ...]:
    return adapter.plugins() if group == ENGINES else discover(group)


def test_builtins_are_declared_as_entry_points_too() -> None:
    """pyproject.toml declares our own gates, channels and adapters exactly as BUILTIN lists them."""
    eps = read_toml(REPO / "pyproject.toml", ObservatoryError, "project file")["project"]["entry-points"]
    for group in GROUPS:
        assert eps[group] == _builtin(group), group
    assert ENGINES not in BUILTIN  # the model names no engine: the adapters' table is theirs


def test_installed_builtins_are_found_by_entry_point() -> None:
    """With the package installed (setup.sh), the metadata carries the built-ins: nothing is found twice."""
    from importlib import metadata

    for group in GROUPS:
        installed = {(e.name, e.value) for e in metadata.entry_points(group=group)}
        assert set(_builtin(group).items()) <= installed, f"reinstall (pip install -e .): {group}"
        found = _discover(group)
        assert len({(p.name, p.value) for p in found}) == len(found)


def test_an_older_install_of_this_package_is_not_a_clash(monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install made before a built-in moved lists the old path under our own distribution: the
    built-in table wins and nothing clashes; the same entry from another package is a clash (the control)."""
    from importlib import metadata

    from observatory.model import plugins

    def entry_points(dist: str) -> Any:
        ep = metadata.EntryPoint(name="vllm", value="observatory.engines.old_place:VLLMAdapter", group=ENGINES)
        ep = ep._for(SimpleNamespace(name=dist, version="0.1.0"))  # type: ignore[attr-defined]
        return lambda group: [ep] if group == ENGINES else []

    try:  # discover() is cached per process: cleared around the fake metadata, so no other test sees it
        plugins.discover.cache_clear()
        monkeypatch.setattr(plugins.metadata, "entry_points", entry_points("specdecode-observatory"))
        found = _discover(ENGINES)
        assert [p.value for p in found if p.name == "vllm"] == [dict(adapter.BUILTIN)["vllm"]]
        plugins.discover.cache_clear()
        monkeypatch.setattr(plugins.metadata, "entry_points", entry_points("someone-else"))
        with pytest.raises(ObservatoryError, match="two plugins of observatory.engines share a name"):
            _discover(ENGINES)
    finally:
        monkeypatch.undo()
        plugins.discover.cache_clear()


def test_a_plugin_that_fails_to_import_is_a_setup_error_naming_it() -> None:
    with pytest.raises(ObservatoryError, match=r"plugin 'broken' .*from pkg 1.0.*ModuleNotFoundError"):
        Plugin("observatory.gates", "broken", "no_such_module_here:X", "pkg 1.0").load()


def _py(env: dict[str, str], code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return install_example_plugin(tmp_path_factory.mktemp("plugin-site"))


def test_an_installed_package_registers_a_gate_a_channel_and_an_engine(plugin_env: dict[str, str]) -> None:
    out = json.loads(_py(plugin_env, """
        import json
        from observatory.channels import channels
        from observatory.engines.adapter import adapter_for, plugins
        from observatory.model.gates import default_registry
        from observatory.model.plugins import discover, CHANNELS, GATES
        print(json.dumps({"gates": sorted(g.name for g in default_registry()), "channels": list(channels()),
                          "engine": adapter_for("Example-VLLM").name,
                          "dists": {p.name: p.dist for ps in (discover(GATES), discover(CHANNELS), plugins())
                                    for p in ps if not p.builtin}}))
    """))
    assert "example_no_wall" in out["gates"] and "token_diff" in out["gates"]
    assert out["channels"][-1] == "example_repeat" and out["channels"][0] == "soak"  # built-ins first
    assert out["engine"] == "example-vllm"
    assert out["dists"] == {n: "observatory-example-plugin 0.1.0" for n in ("example", "example_repeat",
                                                                             "example-vllm")}
    listed = subprocess.run([sys.executable, "-m", "observatory", "gates", "list"], env=plugin_env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0 and "example_no_wall" in listed.stdout, listed.stdout + listed.stderr


def test_the_plugin_gate_trips_on_its_negative_control(plugin_env: dict[str, str]) -> None:
    out = _py(plugin_env, """
        from observatory.model.gates import Output, default_registry
        from observatory.model.probes import Probe
        g, p = default_registry().get("example_no_wall"), Probe(name="p", category="prose", prompt="x")
        print(g.check(Output(text="x" * 61), p).verdict, g.check(Output(text="a few words"), p).verdict)
    """)
    assert out.split() == ["FAIL", "PASS"]


def test_without_the_package_none_of_it_is_there() -> None:
    """The control: the same process without the example installed knows none of its names."""
    from observatory.channels import channels
    from observatory.model.gates import default_registry

    assert "example_no_wall" not in default_registry() and "example_repeat" not in channels()
    with pytest.raises(ObservatoryError, match="Unknown engine 'example-vllm'"):
        from observatory.engines.adapter import adapter_for

        adapter_for("example-vllm")


