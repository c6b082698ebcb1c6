"""tokenizer: train WordPiece on the pretraining corpus (the dataset's unlabelled texts and training texts).

Writes ``tokenizer.json`` (loads in ``transformers.PreTrainedTokenizerFast``) and metrics:
vocabulary size, mean tokens per word and the [UNK] rate on the test split (a check that the
vocabulary covers the task's text).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from tokenizers import Tokenizer

from minibert.tokenizer import UNK, TokenizerConfig, save_tokenizer, train_wordpiece
from pipeline.io import read_table
from pipeline.params import Params, TokenizerParams, load_params
from pipeline.splits import load_split
from pipeline.stages.common import finish_stage
from pipeline.tracking import stage_run


def coverage(tok: Tokenizer, texts: list[str]) -> dict[str, float]:
    """Mean tokens per whitespace word and the fraction of [UNK] tokens (specials excluded)."""
    encodings = tok.encode_batch(texts, add_special_tokens=False)
    tokens = sum(len(e.ids) for e in encodings)
    words = sum(len(t.split()) for t in texts)
    unk = tok.token_to_id(UNK)
    unknown = sum(e.ids.count(unk) for e in encodings)
    return {"tokens_per_word": tokens / max(words, 1), "unk_rate": unknown / max(tokens, 1)}


def run(cfg: TokenizerParams, corpus: pd.DataFrame, test_texts: list[str]) -> tuple[Tokenizer, dict[str, float]]:
    start = time.perf_counter()
    tok = train_wordpiece(
        iter(corpus["text"]),
        TokenizerConfig(vocab_size=cfg.vocab_size, lowercase=cfg.lowercase),
        length=len(corpus),
    )
    metrics = {"vocab_size": tok.get_vocab_size(), "train_seconds": time.perf_counter() - start}
    metrics.update({f"test_{k}": v for k, v in coverage(tok, test_texts).items()})
    return tok, metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("models/tokenizer/tokenizer.json"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/tokenizer.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()

    corpus_path = args.data / "corpus.parquet"
    with stage_run("tokenizer", params, [args.data]) as tracker:
        corpus = read_table(corpus_path, ["text"])
        test = load_split(args.data, "test")
        tracker.log_dataset(corpus, "corpus", corpus_path, context="tokenizer_training", targets=None)
        tok, metrics = run(params.tokenizer, corpus, test["text"].tolist())
        save_tokenizer(tok, args.out)
        finish_stage(tracker, metrics, args.metrics, {args.out: "tokenizer"})


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
