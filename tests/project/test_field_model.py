"""The bundled field model (observatory/field_model): its files load with
training/model.py, and its card's offline acceptance figures reproduce from
the committed weights (no engine; one probe per category)."""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from observatory.model.probes import load_probe_file  # noqa: E402
from tests.support.paths import REPO  # noqa: E402
from training.check_mtp import MAX_K, draft_table, prompt_ids, simulate  # noqa: E402
from training.field.measure import PROBES, measure_probe  # noqa: E402
from training.model import MiMoForCausalLM, load  # noqa: E402

MODEL = REPO / "observatory" / "field_model"
LIMIT_BYTES = 16 * 1024 * 1024
# Acceptance rates may move on another CPU where a draft sits on a near-tie;
# a broken MTP head moves them by far more (the negative control below).
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def model() -> MiMoForCausalLM:
    torch.set_num_threads(1)
    return load(MODEL)


@pytest.fixture(scope="module")
def card() -> dict[str, Any]:
    return json.loads((MODEL / "measurements.json").read_text(encoding="utf-8"))


def _one_per_category(card: dict[str, Any]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for row in card["probes"]:
        seen.setdefault(row["category"], row)
    return list(seen.values())


def _rates(counts: list[list[int]], k: int) -> list[float]:
    drafted = sum(c[0] for c in counts)
    steps = drafted // k
    return [sum(c[1] for c in counts) / drafted] + [sum(c[2 + i] for c in counts) / steps for i in range(k)]


def test_files_load_and_fit(model: MiMoForCausalLM) -> None:
    total = sum(p.stat().st_size for p in MODEL.iterdir())
    assert total <= LIMIT_BYTES, total
    config = json.loads((MODEL / "config.json").read_text())
    assert config["architectures"] == ["MiMoForCausalLM"] and config["num_nextn_predict_layers"] == 1
    tok = transformers.AutoTokenizer.from_pretrained(MODEL)
    assert len(tok) == model.cfg.vocab_size
    assert (MODEL / "README.md").read_text(encoding="utf-8").startswith("# field_model")


def _acceptance(model: MiMoForCausalLM, rows: list[dict[str, Any]]) -> dict[int, list[float]]:
    tok = transformers.AutoTokenizer.from_pretrained(MODEL)
    probes = {p.name: p for p in load_probe_file(PROBES)}
    counts: dict[int, list[list[int]]] = {k: [] for k in range(1, MAX_K + 1)}
    for row in rows:
        prompt = prompt_ids(tok, probes[row["name"]])
        seq = prompt + row["token_ids"]
        drafts = draft_table(model, seq)
        for k in counts:
            counts[k].append(simulate(drafts, seq, len(prompt), k))
    return {k: _rates(c, k) for k, c in counts.items()}


def test_greedy_outputs_reproduce(model: MiMoForCausalLM, card: dict[str, Any]) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(MODEL)
    probes = {p.name: p for p in load_probe_file(PROBES)}
    for row in _one_per_category(card)[:3]:
        fresh = measure_probe(model, tok, probes[row["name"]])
        assert fresh["token_ids"] == row["token_ids"], row["name"]


def test_card_acceptance_reproduces(model: MiMoForCausalLM, card: dict[str, Any]) -> None:
    rows = _one_per_category(card)
    got = _acceptance(model, rows)
    want = {k: _rates([r["acceptance"][str(k)] for r in rows], k) for k in got}
    for k in got:
        assert got[k] == pytest.approx(want[k], abs=TOLERANCE), (k, got[k], want[k])


def test_negative_control_broken_mtp_head_does_not_reproduce(card: dict[str, Any]) -> None:
    """The same check on a mis-wired copy fails: its MTP input projection takes
    (token, hidden) where vLLM concatenates (hidden, token)."""
    broken = load(MODEL)
    with torch.no_grad():
        w = broken.mtp.input_proj.weight
        h = w.shape[1] // 2
        w.copy_(torch.cat([w[:, h:], w[:, :h]], dim=1))
    rows = _one_per_category(card)
    got = _acceptance(broken, rows)
    want = {k: _rates([r["acceptance"][str(k)] for r in rows], k) for k in got}
    assert any(abs(g - w) > TOLERANCE for k in got for g, w in zip(got[k], want[k])), (got, want)
