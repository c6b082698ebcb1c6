"""transfer_set: the unlabelled texts the student learns soft targets on besides the training rows.

Cut from the pretraining corpus (the IMDb unlabelled reviews; ``pipeline.transfer_texts``) with
the ``transfer_set`` params. Every text of a labelled split in the prepared data (train,
validation and test of every task) is left out, and so is any sentence equal to one. With
``rows: 0`` the table is empty and the downstream stages score nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from pipeline.io import read_table, write_table
from pipeline.params import Params, TransferSetParams, load_params
from pipeline.stages.common import finish_stage
from pipeline.tracking import stage_run
from pipeline.transfer_texts import CORPUS, labelled_texts, transfer_texts


def run(cfg: TransferSetParams, seed: int, corpus: list[str], labelled: set[str]) -> tuple[list[str], dict[str, float]]:
    """``cfg.rows`` texts drawn from ``corpus`` (none of the ``labelled`` ones), and the metrics."""
    texts = transfer_texts(corpus, labelled, cfg.rows, seed)
    words = [len(t.split()) for t in texts]
    return texts, {"rows": len(texts), "requested_rows": cfg.rows, "mean_words": sum(words) / len(words) if words else 0.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/prepared"))
    parser.add_argument("--out", type=Path, default=Path("data/transfer/texts.parquet"))
    parser.add_argument("--metrics", type=Path, default=Path("metrics/transfer_set.json"))
    args = parser.parse_args(argv)
    params: Params = load_params()
    cfg = params.transfer_set
    with stage_run("transfer_set", params, [args.data / CORPUS]) as tracker:
        corpus = read_table(args.data / CORPUS, ["text"])["text"].tolist()
        texts, metrics = run(cfg, params.train.seed, corpus, labelled_texts(args.data))
        if 0 < len(texts) < cfg.rows:
            print(f"transfer_set: the corpus gave {len(texts)} texts of the {cfg.rows} asked for")
        write_table(pd.DataFrame({"text": pd.Series(texts, dtype=str)}), args.out)
        finish_stage(tracker, metrics, args.metrics)


if __name__ == "__main__":
    from pipeline.runner import run_main

    run_main(main)
