"""A prompt's input embeddings, read from the model's own embedding table (for ``prompt_embeds`` requests).

The channel ``prompt_embeds`` (docs/channels.md) sends a prompt as the
embeddings the model itself would look up for its token ids, so the answer
must equal the answer to the same ids. Those rows come from the served
model's checkpoint on this host (a Hugging Face folder: ``*.safetensors``,
sharded or not), read without loading the table: the safetensors header says
where each tensor lies, and only the prompt's rows are read. The rows keep the
checkpoint's dtype (float32, float16 or bfloat16, the last as its raw 16-bit
words): the engine casts them to its serving dtype exactly as it cast its own
weights, so nothing is rounded twice. How an engine takes them (vLLM: a
base64 ``torch.save`` of the tensor) is its adapter's (`prompt_embeds_body`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from observatory.model.errors import ObservatoryError

# The embedding table's name ends in one of these in the checkpoints we know (Llama, Qwen, MiMo, Mistral:
# model.embed_tokens.weight; GPT-2: transformer.wte.weight; BLOOM: word_embeddings.weight; Llama 1: tok_embeddings)
TABLE_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight")
_DTYPES: dict[str, np.dtype[Any]] = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
MAX_HEADER = 64 * 1024 * 1024  # a safetensors header longer than this is not one


@dataclass(frozen=True)
class Rows:
    """Some rows of the embedding table: float32/float16 values, or bfloat16 as raw uint16 words."""

    values: np.ndarray  # shape (len(ids), hidden)
    dtype: str  # "float32", "float16" or "bfloat16"


def _header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ObservatoryError(f"{path}: not a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER:
            raise ObservatoryError(f"{path}: not a safetensors file (header of {n} bytes)")
        header = json.loads(f.read(n))
    if not isinstance(header, dict):
        raise ObservatoryError(f"{path}: not a safetensors file")
    return header, 8 + n


def _files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map") or {}
        names = sorted({str(v) for k, v in weight_map.items() if str(k).endswith(TABLE_SUFFIXES)})
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))


def embedding_rows(model: str, ids: list[int]) -> Rows:
    """The rows IDS of the embedding table of the checkpoint in folder MODEL (ObservatoryError saying why not)."""
    folder = Path(model)
    if not folder.is_dir():
        raise ObservatoryError(f"the served model {model!r} is not a folder on this host: its embedding table "
                               "cannot be read")
    for path in _files(folder):
        header, start = _header(path)
        names = [k for k in header if k != "__metadata__" and k.endswith(TABLE_SUFFIXES)]
        if not names:
            continue
        meta = header[sorted(names, key=len)[0]]  # the shortest: the trunk's table, not a drafter's copy
        dtype = _DTYPES.get(str(meta.get("dtype")))
        shape = meta.get("shape") or []
        if dtype is None or len(shape) != 2:
            raise ObservatoryError(f"{path}: embedding table of dtype {meta.get('dtype')} and shape {shape}: "
                                   "not read (float32, float16 or bfloat16, 2-D)")
        vocab, hidden = int(shape[0]), int(shape[1])
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise ObservatoryError(f"token id {bad[0]} is outside the embedding table ({vocab} rows)")
        begin = start + int(meta["data_offsets"][0])
        table: np.ndarray = np.memmap(str(path), dtype=dtype, mode="r", offset=begin, shape=(vocab, hidden))
        values = np.array(table[np.asarray(ids, dtype=np.int64)])
        kind = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[str(meta["dtype"])]
        return Rows(values, kind)
    raise ObservatoryError(f"no embedding table ({', '.join(TABLE_SUFFIXES)}) in {folder}'s safetensors files")
