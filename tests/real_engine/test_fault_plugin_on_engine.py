"""Engine tests of the fault plugin: the real vLLM CPU engine, one server per arm.

Run with ``pytest -m engine tests/real_engine/test_fault_plugin_on_engine.py`` (about 3 minutes on 2
cores: four servers of ~40 s each, plus one that must fail at startup).
Skipped when vLLM is not importable or the ``observatory_faults`` entry point
is not installed (``pip install -e .``).

The model is a toy MiMo (``MiMoForCausalLM`` + one MTP layer, float32) built
into a temporary folder by `build_toy_model`. Its weights are not random but
*constructed* so that every fault has an exact, predictable signature:

- the attention and MLP output projections are zero, so the residual stream of
  the target at a token is that token's embedding ``E[t]``, and
  ``lm_head[perm[u]] = E[u]`` makes the target a deterministic Markov chain:
  greedy ``t -> perm[t]`` (a derangement, so no token ever follows itself);
- the MTP layer's ``input_proj`` is ``[alpha * Q | I]`` over
  ``[norm(target hidden), norm(embedding)]`` (``Q`` a random rotation), so with
  last token ``l`` and its predecessor ``p`` the draft is
  ``argmax_v lm_head[v] . norm(alpha * Q n(E[p]) + n(E[l]))``: ``perm[l]`` (the
  right guess) unless the rotated-noise term wins, and then some unrelated
  token (almost never a repeat of ``l``, so it cannot pass for a ghost). With
  ``alpha = 3.5`` a bit over half the drafts are right, so the outputs have
  both fully accepted steps (``drop_bonus`` is visible) and rejected ones
  (``accept_all`` is visible).

Signatures asserted (greedy, ``ignore_eos``, token ids from the logprobs):

- base arm (no speculation) with *every* fault named: exactly the Markov chain;
- ``ghost``: more tokens than asked, consecutive duplicates, and removing the
  duplicates gives exactly the chain;
- ``drop_bonus``: fewer tokens than asked, a strict subsequence of the chain
  (the engine kept generating the chain; only the stream lost tokens);
- ``accept_all``: every token is either the target's choice or the draft head's
  proposal for that position, and at least one is not the target's choice.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SPECIALS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
HIDDEN = 128
INTERMEDIATE = 256
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = HIDDEN // NUM_HEADS


# --------------------------------------------------------------------------
# Toy model
# --------------------------------------------------------------------------


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "speculative decoding proposes tokens and the target verifies them",
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        "def add(a, b):\n    return a + b\n",
    ] * 20
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


@dataclass
class ToyModel:
    path: Path
    perm: list[int]  # target greedy successor of each token
    emb: object  # np.ndarray [V, H]
    rot: object  # np.ndarray [H, H], the MTP's rotation of the target hidden
    alpha: float

    @property
    def vocab_size(self) -> int:
        return len(self.perm)

    def chain(self, start: int, n: int) -> list[int]:
        """The target's greedy continuation of a prompt ending in `start`."""
        out, t = [], start
        for _ in range(n):
            t = self.perm[t]
            out.append(t)
        return out

    def draft_scores(self, prev: int, last: int):
        """The MTP head's logits for the token after `last` (preceded by `prev`)."""
        import numpy as np

        def rms_norm(x):
            return x / np.sqrt(np.mean(x * x) + 1e-6)

        x = self.alpha * (self.rot @ rms_norm(self.emb[prev])) + rms_norm(self.emb[last])
        x = rms_norm(x)
        inv = np.argsort(self.perm)  # lm_head[v] = E[inv[v]]
        return self.emb[inv] @ x

    def draft_candidates(self, prev: int, last: int, margin: float = 0.05) -> set[int]:
        """Tokens the MTP head may propose (all within `margin` of its top logit)."""
        s = self.draft_scores(prev, last)
        return {int(v) for v in (s >= s.max() - margin).nonzero()[0]}


def build_toy_model(dest: Path, seed: int = 0, alpha: float = 3.5) -> ToyModel:
    """Write a toy MiMo+MTP checkpoint (config, safetensors, tokenizer) into `dest`."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(300)
    vocab = tok.get_vocab_size()
    tok.save(str(dest / "tokenizer.json"))
    eos_id = tok.token_to_id("<|im_end|>")

    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((vocab, HIDDEN)).astype(np.float32)
    # A derangement (no fixed point) so the chain never repeats a token twice in
    # a row: a ghost (duplicate) is then always distinguishable.
    while True:
        perm = rng.permutation(vocab)
        if not np.any(perm == np.arange(vocab)):
            break
    lm_head = np.empty_like(emb)
    lm_head[perm] = emb  # lm_head[perm[u]] = E[u]
    rot, _ = np.linalg.qr(rng.standard_normal((HIDDEN, HIDDEN)))
    rot = rot.astype(np.float32)

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    def layer(prefix: str) -> dict[str, torch.Tensor]:
        q, kv = NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM
        return {
            f"{prefix}.self_attn.q_proj.weight": rnd(q, HIDDEN),
            f"{prefix}.self_attn.q_proj.bias": rnd(q),
            f"{prefix}.self_attn.k_proj.weight": rnd(kv, HIDDEN),
            f"{prefix}.self_attn.k_proj.bias": rnd(kv),
            f"{prefix}.self_attn.v_proj.weight": rnd(kv, HIDDEN),
            f"{prefix}.self_attn.v_proj.bias": rnd(kv),
            # Zero output projections: the layers add nothing to the residual.
            f"{prefix}.self_attn.o_proj.weight": torch.zeros(HIDDEN, q),
            f"{prefix}.mlp.gate_proj.weight": rnd(INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": rnd(INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": torch.zeros(HIDDEN, INTERMEDIATE),
            f"{prefix}.input_layernorm.weight": torch.ones(HIDDEN),
            f"{prefix}.post_attention_layernorm.weight": torch.ones(HIDDEN),
        }

    tensors: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": torch.from_numpy(emb.copy()),
        "model.norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": torch.from_numpy(lm_head),
    }
    for i in range(NUM_LAYERS):
        tensors.update(layer(f"model.layers.{i}"))
    mtp = "model.mtp_layers.0"
    tensors.update(layer(mtp))
    eye = torch.eye(HIDDEN)
    tensors.update(
        {
            f"{mtp}.token_layernorm.weight": torch.ones(HIDDEN),
            f"{mtp}.hidden_layernorm.weight": torch.ones(HIDDEN),
            # cat([norm(previous hidden), norm(token embedding)]) -> hidden
            f"{mtp}.input_proj.weight": torch.cat([alpha * torch.from_numpy(rot), eye], dim=1),
            f"{mtp}.final_layernorm.weight": torch.ones(HIDDEN),
        }
    )
    save_file(
        {k: v.contiguous().to(torch.float32) for k, v in tensors.items()},
        str(dest / "model.safetensors"),
        metadata={"format": "pt"},
    )
    config = {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "max_position_embeddings": 2048,
        "max_window_layers": NUM_LAYERS,
        "use_sliding_window": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "num_nextn_predict_layers": 1,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "attention_dropout": 0.0,
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    (dest / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id}))
    (dest / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|im_end|>",
                "pad_token": "<|im_end|>",
                "model_max_length": 2048,
                "additional_special_tokens": SPECIALS,
            },
            indent=2,
        )
    )
    (dest / "toy.json").write_text(json.dumps({"perm": perm.tolist(), "alpha": alpha}))
    return ToyModel(dest, [int(x) for x in perm], emb, rot, alpha)


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An OpenAI-compatible vLLM server in its own process group."""

    def __init__(self, model: Path, log: Path, *, spec: bool, fault: str | None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", "1024", "--seed", "0",
            "--max-num-seqs", "4",
        ]  # fmt: skip
        if spec:
            cmd += [
                "--speculative-config",
                json.dumps({"method": "mtp", "num_speculative_tokens": 1}),
            ]
        env = dict(os.environ)
        env.pop("OBSERVATORY_FAULT", None)
        if fault:
            env["OBSERVATORY_FAULT"] = fault
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self.log = log
        self._logf = open(log, "wb")
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self._logf, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, timeout: float = 300.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        self._logf.flush()
        return self.log.read_bytes()[-n:].decode(errors="replace")

    def complete(self, prompt: list[int], max_tokens: int) -> list[int]:
        import httpx

        r = httpx.post(
            self.url + "/v1/completions",
            json={
                "model": str(self.model_name()),
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0,
                "logprobs": 1,
                "return_tokens_as_token_ids": True,
                "ignore_eos": True,
            },
            timeout=120,
        )
        r.raise_for_status()
        toks = r.json()["choices"][0]["logprobs"]["tokens"]
        return [int(t.split(":", 1)[1]) for t in toks]

    def model_name(self) -> str:
        import httpx

        return httpx.get(self.url + "/v1/models", timeout=10).json()["data"][0]["id"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self._logf.close()


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


PROMPT = [20, 21, 12]
MAX_TOKENS = 32
ALL_FAULTS = "accept_all,ghost,drop_bonus"


def _plugin_installed() -> bool:
    from importlib.metadata import entry_points

    return any(
        ep.name == "observatory_faults" and ep.value == "observatory.faults:register"
        for ep in entry_points(group="vllm.general_plugins")
    )


def _skip_reason() -> str | None:
    import importlib.util

    for mod in ("vllm", "torch", "safetensors", "tokenizers", "httpx"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not importable"
    if not _plugin_installed():
        return "the observatory_faults entry point is not installed (pip install -e .)"
    return None


_reason = _skip_reason()
if _reason:
    pytestmark = pytest.mark.skip(reason=_reason)


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> ToyModel:
    return build_toy_model(tmp_path_factory.mktemp("toymimo"))


@pytest.fixture
def serve(toy, tmp_path):
    servers: list[Server] = []

    def start(*, spec: bool, fault: str | None) -> Server:
        name = f"{'spec' if spec else 'base'}-{fault or 'clean'}".replace(",", "+")
        s = Server(toy.path, tmp_path / f"{name}.log", spec=spec, fault=fault)
        servers.append(s)
        s.wait_ready()
        return s

    yield start
    for s in servers:
        s.stop()


def _dedupe(tokens: list[int]) -> list[int]:
    return [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]


def _is_subsequence(short: list[int], long: list[int]) -> bool:
    it = iter(long)
    return all(any(t == u for u in it) for t in short)


def test_unknown_fault_stops_the_server(toy, tmp_path):
    s = Server(toy.path, tmp_path / "bogus.log", spec=True, fault="ghots")
    try:
        rc = s.proc.wait(timeout=120)
    finally:
        s.stop()
    assert rc != 0
    log = s.log.read_text(errors="replace")
    assert "FaultConfigError" in log and "unknown fault(s) ghots" in log


def test_base_arm_untouched_with_every_fault(toy, serve):
    s = serve(spec=False, fault=ALL_FAULTS)
    assert s.complete(PROMPT, MAX_TOKENS) == toy.chain(PROMPT[-1], MAX_TOKENS)


def test_ghost_duplicates_step_boundary_tokens(toy, serve):
    s = serve(spec=True, fault="ghost")
    out = s.complete(PROMPT, MAX_TOKENS)
    clean = toy.chain(PROMPT[-1], MAX_TOKENS)
    # Engine state is untouched: the engine stops after MAX_TOKENS of its own
    # tokens, the client gets those plus one ghost per speculative step.
    assert len(out) > MAX_TOKENS, out
    assert _dedupe(out) == clean, (out, clean)


def test_drop_bonus_loses_tokens_of_fully_accepted_steps(toy, serve):
    s = serve(spec=True, fault="drop_bonus")
    out = s.complete(PROMPT, MAX_TOKENS)
    clean = toy.chain(PROMPT[-1], MAX_TOKENS)
    assert len(out) < MAX_TOKENS, out
    assert out[0] == clean[0]  # the prefill step is not speculative
    assert _is_subsequence(out, clean), (out, clean)


def test_accept_all_emits_the_draft_heads_proposals(toy, serve):
    s = serve(spec=True, fault="accept_all")
    out = s.complete(PROMPT, MAX_TOKENS)
    assert len(out) == MAX_TOKENS
    assert out[0] == toy.perm[PROMPT[-1]]  # the prefill step is not speculative
    seq = PROMPT + out
    wrong = 0
    for n in range(len(PROMPT) + 1, len(seq)):
        prev, last, tok = seq[n - 2], seq[n - 1], seq[n]
        if tok == toy.perm[last]:
            continue  # what the target itself would emit (a bonus or a right draft)
        wrong += 1
        assert tok in toy.draft_candidates(prev, last), (n, seq)
    assert wrong > 0, out  # some draft the target would have rejected got through


if __name__ == "__main__":  # python tests/real_engine/test_fault_plugin_on_engine.py build DEST
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        m = build_toy_model(Path(sys.argv[2]))
        print(f"built {m.path}: vocab {m.vocab_size}")
    else:
        print(__doc__)
