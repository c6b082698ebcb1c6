"""Ensemble distillation vs the teacher alone: the same student, seeds and teacher, soft targets mixed or not,
with or without a transfer set of unlabelled sentences.

On a finished pipeline run (``--root``: its prepared data, tokenizer, teacher and teacher logits),
computes TF-IDF + LR's out-of-fold probabilities once (the ``baseline_oof`` stage's code, with
params.yaml's ``baseline`` section, the intermediate task's texts and ``train.seed``), then trains the
``distill`` stage's student for every (baseline share, seed) pair and scores it on the test split of record
(``--split val`` for the validation split: IMDb's test split takes minutes a model). Share 0 is the
teacher alone. ``--transfer-rows`` adds the first N texts of the transfer set (``transfer_set``
params, cut from the run's corpus: the ``transfer_set`` stage's code), scored once by the teacher and
by TF-IDF fitted on every training text; 0 = the training rows only. ``--epochs`` lists distillation
lengths (default: ``distill.epochs``). Prints tables of accuracies (the scored split, and validation:
the best pass, which the student keeps) with each (share, rows, epochs) arm's mean gain over the first,
seed by seed, and appends one JSON record to benchmarks/results/ensemble_distill.jsonl.

    python benchmarks/ensemble_distill.py --root <run> --shares 0,0.3 --seeds 0,1,2
    python benchmarks/ensemble_distill.py --root <run> --shares 0.3 --transfer-rows 0,100000 --seeds 0,1,2
    python benchmarks/ensemble_distill.py --root <run> --shares 0.3 --transfer-rows 100000 --epochs 1,2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from common import ROOT, add_params_args, load_with_overrides, parse_overrides

from minibert.checkpoint import load_model
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline.distillation import distill_transformer as distill
from pipeline.distillation import with_transfer
from pipeline.io import read_table
from pipeline.scoring import teacher_logits as score_teacher
from pipeline.scoring import validation
from pipeline.soft_targets import UNLABELLED, combine, load_logits, log_probabilities
from pipeline.splits import load_split, prepared
from pipeline.task import encode_train_indexed
from pipeline.tfidf import FOLDS, fold_jobs, out_of_fold
from pipeline.transfer_texts import CORPUS, labelled_texts, transfer_texts


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--root", type=Path, required=True, help="a finished pipeline run's project folder")
    parser.add_argument("--shares", type=floats, default=[0.0, 0.3], help="baseline shares; 0 = the teacher alone")
    parser.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[0, 1, 2])
    parser.add_argument("--transfer-rows", type=lambda t: [int(x) for x in t.split(",")], default=[0],
                        help="transfer-set sizes; 0 = the training rows only")
    parser.add_argument("--epochs", type=floats, default=None,
                        help="distillation lengths in epochs (default: the params' distill.epochs)")
    parser.add_argument("--split", choices=["test", "val"], default="test")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    task, seed = params.task, params.train.seed
    data = args.root / "data" / "prepared"
    intermediate = prepared(data).intermediate
    ensemble = {"folds": FOLDS, "extra_task": intermediate or "none", "seed": seed}  # what baseline_oof fits with
    tok = load_tokenizer(args.root / "models" / "tokenizer" / "tokenizer.json")
    train, val, scored = (load_split(data, s) for s in ("train", "val", args.split))
    extra = None if intermediate is None else load_split(data, "train", intermediate=True)
    teacher, _, head_cfg = load_model(args.root / "models" / "finetune" / "model.safetensors")
    sequences, labels, text_index = encode_train_indexed(tok, train, task)
    teacher_logits = load_logits(args.root / "models" / "teacher_logits" / "train.npz", labels)
    texts = transfer_texts(read_table(data / CORPUS, ["text"])["text"].tolist(), labelled_texts(data),
                           max(args.transfer_rows), seed)
    start = time.perf_counter()
    oof, transfer_oof = out_of_fold(params.baseline, train, extra, FOLDS, seed, fold_jobs(FOLDS + 1), texts)
    oof_seconds = time.perf_counter() - start
    transfer_df = pd.DataFrame({"text": pd.Series(texts, dtype=str), "label": UNLABELLED})
    transfer, _, transfer_index = encode_train_indexed(tok, transfer_df, task)
    transfer_teacher = score_teacher(teacher, transfer, "teacher logits, transfer set", params.train.precision)
    val_fn, score_fn = validation(tok, val, task), validation(tok, scored, task)
    y = scored["label"].to_numpy()
    rows = []
    lengths = args.epochs or [params.distill.epochs]
    arms = [(share, n, e) for share in args.shares for n in args.transfer_rows for e in lengths]
    oof_logp, transfer_oof_logp = log_probabilities(oof), log_probabilities(transfer_oof)  # the same for every arm
    for student_seed in args.seeds:
        shared = dataclasses.replace(params.train, seed=student_seed)
        for share, n, epochs in arms:
            cfg = dataclasses.replace(params.distill, epochs=epochs)
            shares = {"teacher": 1.0 - share, "tfidf": share}  # as the soft_targets stage mixes them
            targets = combine(shares, {"teacher": teacher_logits, "tfidf": oof_logp[text_index]})
            keep = transfer_index < n  # the rows of the first n texts
            extra_targets = combine(shares, {"teacher": transfer_teacher[keep], "tfidf": transfer_oof_logp[transfer_index[keep]]})
            train_rows, all_targets = with_transfer((sequences, labels), targets,
                                                    [t for t, k in zip(transfer, keep, strict=True) if k], extra_targets)
            student, metrics = distill(cfg, shared, teacher, head_cfg, params.student_config(tok.get_vocab_size()),
                                       train_rows, all_targets, val_fn, NullTracker())
            accuracy = float((score_fn[0](student).argmax(axis=1) == y).mean())
            rows.append({"seed": student_seed, "share": share, "transfer_rows": n, "epochs": epochs, "accuracy": accuracy,
                         "val_accuracy": metrics["val_accuracy"], "steps": metrics["steps"],
                         "train_seconds": metrics["train_seconds"],
                         "soft_target_train_accuracy": float((targets.argmax(axis=1) == labels).mean())})
            print(json.dumps(rows[-1]), flush=True)
    for key, label in (("accuracy", args.split), ("val_accuracy", "val (best pass, the one kept)")):
        acc = {arm: {r["seed"]: r[key] for r in rows if (r["share"], r["transfer_rows"], r["epochs"]) == arm} for arm in arms}
        print(f"\n{params.data.dataset} {label} accuracy of the distilled student (teacher: {args.root})")
        print("| share | transfer rows | epochs | " + " | ".join(f"seed {s}" for s in args.seeds)
              + f" | mean | mean gain over {' / '.join(map(str, arms[0]))} |")
        print("|---" * (len(args.seeds) + 5) + "|")
        for arm in arms:
            gain = np.mean([acc[arm][s] - acc[arms[0]][s] for s in args.seeds]) * 100
            print("| " + " | ".join(map(str, arm)) + " | " + " | ".join(f"{100 * acc[arm][s]:.2f}" for s in args.seeds)
                  + f" | {100 * np.mean(list(acc[arm].values())):.2f} | {gain:+.2f} |")
    record = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "root": str(args.root), "task": params.data.dataset,
              "split": args.split, "ensemble": ensemble, "oof_seconds": oof_seconds,
              "distill": {"epochs": lengths, "time_budget_min": params.distill.time_budget_min},
              "transfer_set": dataclasses.asdict(params.transfer_set),
              "oof_accuracy": float((oof.argmax(axis=1) == train["label"].to_numpy()).mean()), "runs": rows}
    with open(ROOT / "benchmarks" / "results" / "ensemble_distill.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
