"""The field model's byte-level BPE tokenizer, trained on the field corpus.

Unlike the default model's (`training.build_tokenizer`), merges are learned
on Qwen2's own pre-tokens (the pre-tokenizer transformers, hence vLLM,
imposes on a qwen2 checkpoint), as a real Qwen2-style tokenizer is: words
keep their leading space, runs of Han characters merge, digits stay single.
Special tokens, tool tags, chat template and tokenizer_config.json are the
default model's.

Usage: python -m training.field.build_tokenizer [OUT_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from training.build_tokenizer import _SPECIAL_RE, QWEN2_PATTERN, _pre_tokenizer, tokenizer_config
from training.corpus import Example
from training.field.corpus import generate, pools
from training.field.sources import documents
from training.render import CHATML_TOKENS, TOOL_TOKENS, split_example

VOCAB_SIZE = 4096
FIELD_MODEL = Path(__file__).resolve().parents[2] / "observatory" / "field_model"


def training_texts(examples: list[Example]) -> list[str]:
    """Rendered examples with the special tokens cut out."""
    texts = []
    for ex in examples:
        prompt, completion = split_example(ex)
        texts.extend(p for p in _SPECIAL_RE.split(prompt + completion) if p)
    return texts


def build(examples: list[Example]) -> Tokenizer:
    """A BPE tokenizer trained on `examples` (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(QWEN2_PATTERN)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        min_frequency=2,
        special_tokens=list(CHATML_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_texts(examples), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tok


def main(out_dir: Path = FIELD_MODEL) -> None:
    """Write tokenizer.json and tokenizer_config.json into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build(list(generate(pools(documents()))))
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(tok), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else FIELD_MODEL)
