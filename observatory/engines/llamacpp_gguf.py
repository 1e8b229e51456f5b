"""The bundled model's base network as GGUF for llama.cpp, written with gguf-py directly.

The checkpoint is a MiMoForCausalLM: a plain Qwen2 decoder (what llama.cpp's
``qwen2`` architecture computes) plus an MTP layer that llama.cpp's Qwen2 does not
load; only the trunk is written. ``convert_hf_to_gguf.py`` is not used: it
recognises a BPE pre-tokenizer by hashing how the tokenizer splits a test text
and refuses ours, trained here (training/build_tokenizer.py). Ours splits with
exactly Qwen2's regex, so the GGUF names llama.cpp's ``qwen2`` pre-tokenizer;
`check_pre_tokenizer` refuses to write a file when that is not so, and
tests/real_engine/test_llamacpp_engine.py checks llama.cpp's /tokenize against our
tokenizer on every default probe.

``--layers N`` writes the first N decoder layers with the same final norm and
head: a layer-skip draft model of the same vocabulary for llama.cpp's
draft-simple speculation (cheaper than the target, agreeing with it often but
not always, so rejections are exercised).

    python -m training.gguf_export OUT.gguf [--layers N] [--gguf-py DIR]

`observatory.engines.llamacpp` calls `export` on demand, caching the files next to the
llama-server binary (gguf-py from the same llama.cpp source tree).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from observatory.model.paths import PACKAGE_DIR

MODEL_DIR = PACKAGE_DIR / "default_model"
# Qwen2's pre-tokenizer split as in its tokenizer.json; llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2
# (src/llama-vocab.cpp) implements it.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# HF name -> GGUF name (llama.cpp's qwen2 tensors, gguf-py tensor_mapping.py)
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}


def check_pre_tokenizer(tokenizer: dict[str, Any]) -> None:
    """Raise ValueError unless TOKENIZER is a byte-level BPE that splits exactly as Qwen2's does."""
    model = tokenizer.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer model is {model.get('type')!r}, not BPE")
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") or [pre]
    splits = [s for s in steps if s.get("type") == "Split"]
    if len(splits) != 1 or splits[0].get("pattern", {}).get("Regex") != QWEN2_SPLIT:
        raise ValueError("the tokenizer's pre-tokenizer split is not Qwen2's; llama.cpp's 'qwen2' would split "
                         "differently: add its regex to llama.cpp or retrain the tokenizer with Qwen2's split")
    if not any(s.get("type") == "ByteLevel" for s in steps):
        raise ValueError("the tokenizer is not byte-level; llama.cpp's gpt2 BPE needs byte-level tokens")


def vocab_arrays(tokenizer: dict[str, Any], vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, llama.cpp token types, merges 'a b') from tokenizer.json."""
    from gguf import TokenType

    tokens: list[str | None] = [None] * vocab_size
    types = [int(TokenType.NORMAL)] * vocab_size
    for text, i in tokenizer["model"]["vocab"].items():
        tokens[i] = text
    for added in tokenizer.get("added_tokens") or []:
        i = added["id"]
        tokens[i] = added["content"]
        types[i] = int(TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED)
    for i, t in enumerate(tokens):
        if t is None:  # an id the tokenizer never produces: padding of the embedding matrix
            tokens[i], types[i] = f"[PAD{i}]", int(TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    return [t for t in tokens if t is not None], types, merges


def export(out: Path, layers: int | None = None, model_dir: Path = MODEL_DIR) -> Path:
    """Write the model's first LAYERS decoder layers (all by default) as an F32 GGUF at OUT."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    check_pre_tokenizer(tokenizer)
    n_layers = config["num_hidden_layers"] if layers is None else layers
    if not 1 <= n_layers <= config["num_hidden_layers"]:
        raise ValueError(f"--layers must be 1..{config['num_hidden_layers']}, got {n_layers}")
    weights = load_file(str(model_dir / "model.safetensors"))

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "qwen2")
    w.add_name("observatory-default" + ("" if layers is None else f"-draft-{n_layers}l"))
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(n_layers)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(config["num_attention_heads"])
    w.add_head_count_kv(config["num_key_value_heads"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_freq_base(config["rope_theta"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokens, types, merges = vocab_arrays(tokenizer, config["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(config["eos_token_id"])
    w.add_pad_token_id(config["pad_token_id"])
    w.add_add_bos_token(False)  # add_bos_token false, bos_token null (tokenizer_config.json)
    w.add_chat_template(llama_chat_template(tok_config["chat_template"]))

    for name, arr in weights.items():
        if name in _TOP_NAMES:
            w.add_tensor(_TOP_NAMES[name], np.ascontiguousarray(arr, dtype=np.float32))
            continue
        parts = name.split(".")
        if parts[:2] != ["model", "layers"]:
            continue  # the MTP layer (model.mtp_layers.*): llama.cpp's qwen2 has no place for it
        i = int(parts[2])
        if i < n_layers:
            w.add_tensor(f"blk.{i}.{_LAYER_NAMES['.'.join(parts[3:])]}", np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return out


# Key-sorted compact JSON without tojson(sort_keys=true), which llama.cpp's jinja refuses (400 "tojson
# sort_keys=true not implemented", common/jinja/value.cpp). llama.cpp's dictsort compares keys byte by
# byte (its FIXME: "always case sensitive"), which is json.dumps(sort_keys=True)'s order for UTF-8 keys.
# (Python's jinja would sort case-insensitively: this macro is for llama.cpp only.)
_SORTED_JSON_MACRO = """{%- macro _sorted_json(v) -%}
    {%- if v is mapping -%}
        {{- '{' -}}
        {%- for k, x in v | dictsort -%}
            {%- if not loop.first -%}{{- ',' -}}{%- endif -%}
            {{- k | tojson -}}{{- ':' -}}{{- _sorted_json(x) -}}
        {%- endfor -%}
        {{- '}' -}}
    {%- elif v is iterable and v is not string -%}
        {{- '[' -}}
        {%- for x in v -%}
            {%- if not loop.first -%}{{- ',' -}}{%- endif -%}
            {{- _sorted_json(x) -}}
        {%- endfor -%}
        {{- ']' -}}
    {%- else -%}
        {{- v | tojson -}}
    {%- endif -%}
{%- endmacro -%}
"""
_SORTED_TOJSON = re.compile(r"\(\s*([\w.]+)\s*\|\s*tojson\(\s*separators=\(\s*',\s*'\s*,\s*':'\s*\)\s*,\s*sort_keys=true\s*\)\s*\)")


def llama_chat_template(template: str) -> str:
    """TEMPLATE as llama.cpp's jinja can render it, with the same output: compact key-sorted tojson by a macro.

    ``(X | tojson(separators=(',', ':'), sort_keys=true))`` becomes
    ``_sorted_json(X)``; any other use of sort_keys is refused (ValueError),
    since llama.cpp would answer every request that reaches it with a 400.
    """
    out, n = _SORTED_TOJSON.subn(r"_sorted_json(\1)", template)
    if "sort_keys" in out:
        raise ValueError("the chat template calls tojson(sort_keys=...) in a form the GGUF export cannot rewrite "
                         "for llama.cpp (only `(X | tojson(separators=(',', ':'), sort_keys=true))` is)")
    return _SORTED_JSON_MACRO + out if n else out


def main(argv: list[str] | None = None) -> int:
    """Command line: write the GGUF."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=None, help="decoder layers to keep (a draft model)")
    ap.add_argument("--gguf-py", type=Path, default=None, help="llama.cpp's gguf-py folder (if gguf is not installed)")
    args = ap.parse_args(argv)
    if args.gguf_py is not None:
        sys.path.insert(0, str(args.gguf_py))
    print(export(args.out, args.layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
