"""One Engine protocol (issue 26 item 2): each engine is its adapter, in its own module, and a new engine is
launched, tokenized and read through its adapter alone, with nothing else naming it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest

from observatory.engines import adapter
from observatory.engines.adapter import BUILTIN, Dialect, adapter_for
from observatory.engines.server import engine_argv
from observatory.engines.settings import EngineSettings
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError

ENGINES_DIR = Path(adapter.__file__).parent
KNOWN = dict(adapter.adapters())  # the built-ins (and any installed)


class ToyAdapter(Dialect):
    """An engine the package has never heard of: its module would be engines/toy.py."""

    name = "toy"
    version_key = "version"
    display = "Toy"
    engine_module = None
    binary = "toy-server"
    runs_in_images = False
    health_path = "/ready"

    def server_argv(self, arm: Arm, settings: EngineSettings, port: int, image: str | None = None,
                    env: dict[str, str] | None = None, gpus: list[int] | None = None, container: str | None = None,
                    labels: dict[str, str] | None = None) -> list[str]:
        return ["toy-server", "--model", settings.model, "--port", str(port), "--image", str(image)]

    def version_path(self) -> str:
        return "/version"

    def counters_from_metrics(self, text: str, model: str | None = None) -> Any:
        return None

    def counters_from_response(self, body: Any) -> Any:
        return None


def test_every_builtin_adapter_lives_in_its_engine_module() -> None:
    """vllm.py, sglang.py, llamacpp.py: BUILTIN names each class where it is defined, never the generic module."""
    for name, value in BUILTIN.items():
        module, _, cls = value.partition(":")
        assert module != adapter.__name__ and module.startswith("observatory.engines."), name
        assert getattr(importlib.import_module(module), cls).__module__ == module
        assert adapter_for(name).name in BUILTIN


def test_a_new_engine_is_launched_by_its_adapter_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """server.engine_argv asks the arm's adapter; an engine that runs in no image is never given one."""
    monkeypatch.setattr(adapter, "adapters", lambda: {**KNOWN, "toy": ToyAdapter})
    arm = Arm("base", engine="toy")
    settings = EngineSettings(model="/m", image="some/image:tag")
    assert engine_argv(arm, settings, 9001) == ["toy-server", "--model", "/m", "--port", "9001", "--image", "None"]
    ToyAdapter.runs_in_images = True
    try:
        assert engine_argv(arm, settings, 9001)[-1] == "some/image:tag"
    finally:
        ToyAdapter.runs_in_images = False


def test_an_adapter_that_launches_nothing_says_so() -> None:
    """Dialect's default: an installed adapter that only reads URL arms refuses to launch, naming the engine."""
    class UrlOnly(Dialect):
        display = "UrlOnly"

    with pytest.raises(ObservatoryError, match="UrlOnly arms are not launched by the observatory"):
        UrlOnly().server_argv(Arm("base"), EngineSettings(model="/m"), 8000)


def test_readiness_is_the_adapters_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from observatory.client.send import EngineClient

    monkeypatch.setattr(adapter, "adapters", lambda: {**KNOWN, "toy": ToyAdapter})
    asked: list[str] = []

    class Answer:
        status_code = 200

    client = EngineClient("http://127.0.0.1:1", engine="toy")
    monkeypatch.setattr(client, "fetch", lambda path, timeout: asked.append(path) or Answer())
    assert client.health() and asked == ["/ready"]
    assert adapter_for("vllm").health_path == "/health"  # the built-ins' (Dialect's default)


def _engine_comparisons(source: str) -> list[int]:
    """The lines of SOURCE comparing an ``.engine`` attribute with ``==``/``!=`` to a string literal."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if (any(isinstance(x, ast.Attribute) and x.attr == "engine" for x in sides)
                    and any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in sides)):
                lines.append(node.lineno)
    return lines


def test_no_module_compares_an_engine_to_a_name() -> None:
    """No ``x.engine == "..."`` anywhere in the package: which engine an arm runs is its adapter's business."""
    package = ENGINES_DIR.parent
    found = [f"{p.relative_to(package.parent)}:{n}" for p in package.rglob("*.py")
             for n in _engine_comparisons(p.read_text(encoding="utf-8"))]
    assert not found


def test_negative_control_the_comparison_finder_sees_one() -> None:
    assert _engine_comparisons('x = 1\nif arm.engine == "toy":\n    pass\n') == [2]
    assert _engine_comparisons('if "toy" != arm.engine:\n    pass\n') == [1]
    assert _engine_comparisons("if arm.engine == other:\n    pass\n") == []
