"""WordPiece tokenizer training and loading, on the ``tokenizers`` library, and texts into ids (``encode``).

Reference: BERT's uncased WordPiece (``BertNormalizer`` with lower-casing and accent stripping,
``BertPreTokenizer``, "##" continuation prefix, "[CLS] A [SEP] B [SEP]" template). The saved
``tokenizer.json`` loads unchanged in ``transformers.PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from minibert.files import ArtifactError, atomic_output
from minibert.validation import ConfigError, check_types

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 in this order
PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = 8000  # includes the special tokens
    min_frequency: int = 2  # a merge must be seen this often
    lowercase: bool = True  # uncased BERT; also strips accents
    limit_alphabet: int = 1000  # most frequent initial characters kept; rarer ones become [UNK]

    def __post_init__(self) -> None:
        check_types(self)
        if self.vocab_size <= len(SPECIAL_TOKENS):
            raise ConfigError(f"vocab_size: {self.vocab_size} must exceed the {len(SPECIAL_TOKENS)} special tokens")
        if self.min_frequency < 1:
            raise ConfigError(f"min_frequency: {self.min_frequency} must be >= 1")
        if self.limit_alphabet < 1:
            raise ConfigError(f"limit_alphabet: {self.limit_alphabet} must be >= 1")


def _empty_tokenizer(lowercase: bool) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def train_wordpiece(texts: Iterable[str], cfg: TokenizerConfig, length: int | None = None) -> Tokenizer:
    """Train on an iterator of texts (streamed; never held in memory at once).

    ``length`` is the number of texts if known (progress reporting only).
    """
    tok = _empty_tokenizer(cfg.lowercase)
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        limit_alphabet=cfg.limit_alphabet,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(_checked(texts), trainer=trainer, length=length)
    # The trainer numbers tokens of equal frequency in hash order, which changes from process to
    # process (91 of 8,000 ids on SST-2 + IMDb): renumber so that equal data give equal files.
    # WordPiece matches on the vocabulary as a set, so the numbering changes no tokenization.
    vocab = tok.get_vocab()
    ordered = [*SPECIAL_TOKENS, *sorted(set(vocab) - set(SPECIAL_TOKENS))]
    tok.model = models.WordPiece({t: i for i, t in enumerate(ordered)}, unk_token=UNK, continuing_subword_prefix="##")
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
    return tok


def _checked(texts: Iterable[str]) -> Iterator[str]:
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text #{i} is {type(text).__name__}, expected str")
        yield text


def save_tokenizer(tok: Tokenizer, path: str | os.PathLike[str]) -> Path:
    """Write ``tokenizer.json`` atomically (temp file in the same folder, then rename)."""
    with atomic_output(path) as tmp:
        tok.save(str(tmp))
    return Path(path)


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a ``tokenizer.json``; check it has our special tokens at the expected ids."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer at {path}; run the tokenizer stage first (dvc repro tokenizer)")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as err:
        raise ArtifactError(f"{path} is not a valid tokenizer.json ({err}); rebuild it (the tokenizer stage)") from err
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != expected_id:
            raise ArtifactError(f"{path}: special token {token} has id {tok.token_to_id(token)}, expected {expected_id}; "
                                "was it written by minibert's tokenizer stage?")
    return tok


def encodable(text: str) -> str:
    """``text`` with lone UTF-16 surrogates (which tokenizers refuses) replaced by U+FFFD; valid
    surrogate pairs become the character they encode. Other text is returned as is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def head_tail(ids: Sequence[int], body: int) -> list[int]:
    """The first quarter and last three quarters of ``body`` tokens (Sun et al. 2019: reviews
    state their verdict at the end)."""
    if len(ids) <= body:
        return list(ids)
    head = body // 4
    return [*ids[:head], *ids[len(ids) - (body - head):]]


TRUNCATIONS = ("head", "head_tail")


def encode(tokenizer: Tokenizer, texts: Sequence[str], max_length: int, truncation: str = "head") -> list[list[int]]:
    """Token ids with [CLS] ... [SEP], cut to ``max_length`` (the [SEP] is kept).

    ``truncation``: "head" keeps the first tokens; "head_tail" keeps the first quarter and
    the last three quarters of the window.
    """
    if max_length < 3:
        raise ValueError(f"max_length must be >= 3 to hold [CLS] x [SEP], got {max_length}")
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
    tokenizer.no_padding()
    if truncation == "head_tail":
        tokenizer.no_truncation()
        cls_id, sep_id = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
        docs = tokenizer.encode_batch([encodable(t) for t in texts], add_special_tokens=False)
        return [[cls_id, *head_tail(e.ids, max_length - 2), sep_id] for e in docs]
    tokenizer.enable_truncation(max_length=max_length)
    try:
        return [e.ids for e in tokenizer.encode_batch([encodable(t) for t in texts])]
    finally:
        tokenizer.no_truncation()


def vocabulary_digest(tok: Tokenizer) -> str:
    """sha256 of the token -> id table: two tokenizers with the same digest encode alike."""
    table = json.dumps(sorted(tok.get_vocab(with_added_tokens=True).items()), ensure_ascii=False)
    return hashlib.sha256(table.encode("utf-8")).hexdigest()


def to_transformers_tokenizer(path: str | os.PathLike[str], model_max_length: int = 512) -> Any:
    """Wrap a saved tokenizer.json as ``transformers.PreTrainedTokenizerFast``."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("to_transformers_tokenizer needs transformers: pip install 'minibert[test]'") from err
    return PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
        model_max_length=model_max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )
