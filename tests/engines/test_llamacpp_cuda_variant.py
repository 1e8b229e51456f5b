"""The CUDA llama.cpp build has a cache folder of its own (LLAMA_CUDA, as scripts/build-llama.sh reads it)."""

from pathlib import Path

import pytest

from observatory.engines import llamacpp
from tests.support.paths import REPO


def test_cpu_build_folder_is_the_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OBSERVATORY_LLAMA_CACHE", str(tmp_path))
    monkeypatch.delenv("LLAMA_CUDA", raising=False)
    assert llamacpp.cache_root() == tmp_path / llamacpp.VERSION


def test_cuda_build_folder_names_the_architectures(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OBSERVATORY_LLAMA_CACHE", str(tmp_path))
    monkeypatch.setenv("LLAMA_CUDA", "90")
    assert llamacpp.cache_root() == tmp_path / f"{llamacpp.VERSION}-cuda90"
    monkeypatch.delenv("OBSERVATORY_LLAMA_SERVER", raising=False)
    (tmp_path / f"{llamacpp.VERSION}-cuda90" / "bin").mkdir(parents=True)
    binary = tmp_path / f"{llamacpp.VERSION}-cuda90" / "bin" / "llama-server"
    binary.write_text("")
    assert llamacpp.server_binary() == binary


def test_build_script_cuda_folder_matches(tmp_path: Path) -> None:
    """build-llama.sh and llamacpp.cache_root agree on the CUDA folder's name."""
    script = (REPO / "scripts" / "build-llama.sh").read_text()
    assert 'variant="$version${cuda:+-cuda$cuda}"' in script
    assert '-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda"' in script
