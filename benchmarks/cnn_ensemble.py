"""The word-CNN as a third model family: alone, and averaged with the teacher and TF-IDF.

On a finished pipeline run (``--root``: its prepared data, tokenizer, pretrained encoder and
fine-tuned teacher), trains the ``cnn`` stage's word-level CNN (``pipeline.word_cnn.train_word_cnn``,
params.yaml's ``cnn`` section with ``-S`` overrides) once a seed, fits the ``baseline`` section's
TF-IDF + LR on the task's training split plus the intermediate task's texts (as the
student's soft targets see it), and scores on validation and on the test split of record: each
model alone, their agreement with the teacher, and probability averages of the three (equal
thirds, the pipeline's ``soft_targets.shares``, and
the shares that score best on validation, ``pipeline.soft_targets.shares_on_validation``);
with several seeds, also their CNNs averaged into one member, alone and in the mix at the pipeline's shares.
Prints a table and appends one JSON record to benchmarks/results/cnn_ensemble.jsonl.

    python benchmarks/cnn_ensemble.py --root <run> --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json --seeds 0,1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from common import (
    ROOT,
    accuracy,
    add_params_args,
    fit_tfidf_with_extra,
    load_with_overrides,
    parse_overrides,
    scorers_by_reading,
)

from minibert.checkpoint import load_model
from minibert.runtime import softmax
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline.params import SharesParams
from pipeline.soft_targets import average_at, combine, log_probabilities, shares_on_validation
from pipeline.splits import load_split, prepared
from pipeline.task import encode_train
from pipeline.word_cnn import train_word_cnn, with_extra


def at_shares(shares: SharesParams, teacher: np.ndarray, tfidf: np.ndarray, cnn: np.ndarray) -> np.ndarray:
    """The three models' probabilities mixed at the pipeline's shares, as the soft_targets stage mixes them."""
    return combine(shares.of(), {"teacher": log_probabilities(teacher), "tfidf": log_probabilities(tfidf),
                                 "word_cnn": log_probabilities(cnn)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--root", type=Path, required=True, help="a finished pipeline run's project folder")
    parser.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[0, 1])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    task, cfg, ens = params.task, params.cnn, params.soft_targets.shares
    tok = load_tokenizer(args.tokenizer)
    train_df, val_df, test_df = (load_split(args.data, s) for s in ("train", "val", "test"))
    y_val, y_test = val_df["label"].to_numpy(), test_df["label"].to_numpy()
    scorers_for = scorers_by_reading(tok, [val_df, test_df])
    reads = params.cnn_task()  # the word-CNN's own windows when cnn.max_length is set
    scorers, cnn_scorers = scorers_for(task), scorers_for(reads)

    teacher, _, _ = load_model(args.root / "models" / "finetune" / "model.safetensors")
    t_val, t_test = (softmax(s.logits(teacher)) for s in scorers)
    baseline, fit_rows = fit_tfidf_with_extra(params, args.data, train_df, val_df)
    b_val, b_test = baseline.predict_proba(val_df["text"]), baseline.predict_proba(test_df["text"])

    encoder, _, _ = load_model(args.root / "models" / "pretrain" / "model.safetensors")
    vectors = encoder.backbone.embeddings.tokens.weight.detach().clone()
    (sequences, labels), _ = with_extra(tok, args.data, task, encode_train(tok, train_df, reads))
    num_labels = prepared(args.data).num_labels
    rows, cnn_probs = [], []
    for seed in args.seeds:
        start = time.perf_counter()
        model, _, metrics = train_word_cnn(cfg, dataclasses.replace(params.train, seed=seed), vectors, (sequences, labels),
                                           cnn_scorers[0], NullTracker(), num_labels)
        c_val, c_test = (softmax(s.logits(model)) for s in cnn_scorers)
        cnn_probs.append((c_val, c_test))
        chosen, _ = shares_on_validation([t_val, b_val, c_val], y_val)
        mixes = {
            "cnn": (c_val, c_test),
            "teacher+tfidf (halves)": ((t_val + b_val) / 2, (t_test + b_test) / 2),
            "teacher+cnn (halves)": ((t_val + c_val) / 2, (t_test + c_test) / 2),
            "tfidf+cnn (halves)": ((b_val + c_val) / 2, (b_test + c_test) / 2),
            "all three (thirds)": ((t_val + b_val + c_val) / 3, (t_test + b_test + c_test) / 3),
            f"pipeline shares ({ens.teacher:g}/{ens.tfidf:g}/{ens.word_cnn:g})": (
                at_shares(ens, t_val, b_val, c_val), at_shares(ens, t_test, b_test, c_test)),
            "shares chosen on val (teacher/tfidf/cnn)": (average_at(chosen, [t_val, b_val, c_val]),
                                                         average_at(chosen, [t_test, b_test, c_test])),
        }
        rows.append({"seed": seed, "train_seconds": metrics["train_seconds"], "steps": metrics["steps"],
                     "best_step": metrics["best_step"], "seconds": time.perf_counter() - start,
                     "shares_chosen_on_val": chosen, "agree_with_teacher_test": float((c_test.argmax(1) == t_test.argmax(1)).mean()),
                     **{name: {"val": accuracy(v, y_val), "test": accuracy(t, y_test)} for name, (v, t) in mixes.items()}})
        print(f"seed {seed}: cnn val {rows[-1]['cnn']['val']:.4f} test {rows[-1]['cnn']['test']:.4f} "
              f"({metrics['train_seconds']:.0f} s, {metrics['steps']} steps)", flush=True)
    record = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "root": str(args.root), "task": params.data.dataset,
              "overrides": args.overrides, "cnn": dataclasses.asdict(cfg),
              "teacher": {"val": accuracy(t_val, y_val), "test": accuracy(t_test, y_test)},
              "tfidf": {"val": accuracy(b_val, y_val), "test": accuracy(b_test, y_test), "fit_rows": fit_rows},
              "seeds": rows}
    if len(cnn_probs) > 1:  # the seeds' CNNs averaged into one member: does a CNN ensemble lift the mix?
        c_val, c_test = (np.mean([p[i] for p in cnn_probs], axis=0) for i in (0, 1))  # val and test differ in rows
        chosen, _ = shares_on_validation([t_val, b_val, c_val], y_val)
        averaged = {"cnn seeds averaged": (c_val, c_test),
                    "pipeline shares, cnn seeds averaged": (at_shares(ens, t_val, b_val, c_val), at_shares(ens, t_test, b_test, c_test)),
                    f"shares chosen on val {chosen}, cnn seeds averaged": (average_at(chosen, [t_val, b_val, c_val]),
                                                                           average_at(chosen, [t_test, b_test, c_test]))}
        record["seeds_averaged"] = {name: {"val": accuracy(v, y_val), "test": accuracy(t, y_test)}
                                    for name, (v, t) in averaged.items()}
    print(f"\n| model | val | {params.data.dataset} test of record |\n|---|---|---|")
    print(f"| teacher | {record['teacher']['val']:.2%} | {record['teacher']['test']:.2%} |")
    print(f"| TF-IDF + LR | {record['tfidf']['val']:.2%} | {record['tfidf']['test']:.2%} |")
    for name in [k for k in rows[0] if isinstance(rows[0][k], dict)]:
        vals, tests = [r[name]["val"] for r in rows], [r[name]["test"] for r in rows]
        print(f"| {name} (mean of {len(rows)} seeds) | {np.mean(vals):.2%} | {np.mean(tests):.2%} "
              f"({', '.join(f'{t:.2%}' for t in tests)}) |")
    for name, acc in record.get("seeds_averaged", {}).items():
        print(f"| {name} ({len(rows)} seeds) | {acc['val']:.2%} | {acc['test']:.2%} |")
    with (ROOT / "benchmarks" / "results" / "cnn_ensemble.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
