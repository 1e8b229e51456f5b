"""Train the default model's byte-level BPE tokenizer on the generated corpus.

Merges are learned on fine pre-tokens (words, single digits, single Han
characters, symbol runs and whitespace runs apart); the shipped pre-tokenizer
is Qwen2's, which transformers and vLLM impose on a qwen2 checkpoint anyway
and which, with these merges, gives the same tokens (checked). Special tokens: the ChatML
markers (special) and the hermes tool-call tags (added, not special, so they
survive decoding and vLLM's hermes parser sees them as single tokens).

Usage: python -m training.build_tokenizer [OUT_DIR]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from training.corpus import generate
from training.render import (
    CHAT_TEMPLATE,
    CHATML_TOKENS,
    EOS_TOKEN,
    PAD_TOKEN,
    TOOL_TOKENS,
    split_example,
)

VOCAB_SIZE = 4096  # an upper bound: the corpus runs out of merges first
MODEL_MAX_LENGTH = 1024
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "observatory" / "default_model"

# Merges are learned on fine pre-tokens: a run of letters, a single digit, a
# single Han character, a run of other symbols, a run of whitespace. So no
# merge joins a space or a symbol to a word, or two digits, or two Han
# characters.
TRAIN_PATTERN = r"\p{Han}|(?:(?!\p{Han})\p{L})+|\p{N}|[^\s\p{L}\p{N}]+|\s+"
# The shipped pre-tokenizer is Qwen2's: transformers (hence vLLM) loads any
# tokenizer of a model_type "qwen2" checkpoint as Qwen2Tokenizer, which
# rebuilds the pre-tokenizer with this regex whatever tokenizer.json says.
# Its coarser pieces (" apple", '"river', a run of Han characters) are cut
# back into the fine ones by the merges above, so both give the same tokens;
# `build` checks that on the whole corpus. The upshot: a word or city has the
# same tokens in the question and in the answer (copying it is copying
# tokens), numbers are spelled digit by digit.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPECIAL_RE = re.compile("|".join(re.escape(t) for t in (*CHATML_TOKENS, *TOOL_TOKENS)))


def training_texts() -> list[str]:
    """Corpus text as rendered by the chat template, special tokens cut out
    (they are whole tokens and must not shape the merges)."""
    texts = []
    for ex in generate():
        prompt, completion = split_example(ex)
        texts.extend(p for p in _SPECIAL_RE.split(prompt + completion) if p)
    return texts


def _pre_tokenizer(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build() -> Tokenizer:
    """A trained tokenizer (deterministic for a given corpus) with Qwen2's
    pre-tokenizer, checked to tokenize the corpus as the training one does."""
    texts = training_texts()
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(TRAIN_PATTERN)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        min_frequency=2,
        special_tokens=list(CHATML_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fine = [e.ids for e in tok.encode_batch(texts)]
    tok.pre_tokenizer = _pre_tokenizer(QWEN2_PATTERN)
    for text, ids, enc in zip(texts, fine, tok.encode_batch(texts)):
        if enc.ids != ids:
            raise RuntimeError(f"Qwen2 pre-tokenization changes the tokens of {text!r}")
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return tok


def tokenizer_config(tok: Tokenizer) -> dict:
    """tokenizer_config.json: ChatML eos, no bos, the chat template."""
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in CHATML_TOKENS,
        }
        for t in (*CHATML_TOKENS, *TOOL_TOKENS)
    }
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MODEL_MAX_LENGTH,
        "chat_template": CHAT_TEMPLATE,
    }


def main(out_dir: Path = DEFAULT_OUT) -> None:
    """Write tokenizer.json and tokenizer_config.json into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = build()
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(tok), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
