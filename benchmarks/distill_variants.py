"""Distillation variants on a finished run's own soft targets: how far the student sits below what it learns.

On a finished pipeline run (``--root``), reads the soft targets its stages saved (``teacher_logits``,
``baseline_oof`` and ``cnn``: training rows and transfer set), then for every variant (a ``;``-separated
list of space-separated ``section.key=value`` overrides of the run's params.yaml; an empty variant is
the run's own params) and seed trains the ``distill`` stage's student (``pipeline.distillation.distill_transformer``, or
``run_word_cnn`` from the run's word-CNN for ``distill.student_kind=word_cnn``)
and scores it on validation and on the test split of record. Nothing is refitted, so every variant
learns the same targets. First it prints the members the targets average, on the same splits: the
teacher, the saved word-CNN, TF-IDF + LR refitted as ``baseline_oof``'s folds are (the training rows
plus the intermediate task's texts) and their mix at the run's shares, the student's ceiling.
Prints a table (mean over seeds per variant) and appends one JSON record to
benchmarks/results/distill_variants.jsonl.

    python benchmarks/distill_variants.py --root <run> --seeds 0,1 --variants ';distill.temperature=1.0'
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from common import ROOT, accuracy, fit_tfidf_with_extra, load_with_overrides, parse_overrides, scorers_by_reading

from minibert.checkpoint import load_model, read_contract
from minibert.runtime import softmax
from minibert.textcnn import load_textcnn
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline import distillation
from pipeline.soft_targets import STAGES, combine, source_logits
from pipeline.splits import load_split
from pipeline.task import encode_train_indexed, reading
from pipeline.transfer_texts import load_transfer_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="a finished pipeline run's project folder")
    parser.add_argument("--variants", default="", help="';'-separated variants of space-separated section.key=value")
    parser.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[0, 1])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    root, models = args.root, args.root / "models"
    params = load_with_overrides(root / "params.yaml", {})
    task, ens = params.task, params.soft_targets.shares
    tok = load_tokenizer(models / "tokenizer" / "tokenizer.json")
    data = root / "data" / "prepared"
    train_df, val_df, test_df = (load_split(data, s) for s in ("train", "val", "test"))
    scorers_for = scorers_by_reading(tok, [val_df, test_df])
    scorers = scorers_for(task)
    labels = [s.labels for s in scorers]
    # the word-CNN (member and word_cnn student) reads its own windows when cnn.max_length is set; the student
    # reads as the model it starts from (its file's contract)
    start = models / ("cnn" if params.distill.student_kind == "word_cnn" else "finetune") / "model.safetensors"
    reads = reading(task, read_contract(start).windows)
    cnn_scorers, student_scorers = scorers_for(params.cnn_task()), scorers_for(reads)

    teacher, _, head_cfg = load_model(models / "finetune" / "model.safetensors")
    members = {"teacher": [softmax(s.logits(teacher)) for s in scorers]}
    if ens.word_cnn > 0:
        cnn, _ = load_textcnn(models / "cnn" / "model.safetensors")
        members["cnn"] = [softmax(s.logits(cnn)) for s in cnn_scorers]
    if ens.tfidf > 0:
        baseline, _ = fit_tfidf_with_extra(params, data, train_df, val_df)
        members["tfidf"] = [baseline.predict_proba(df["text"]) for df in (val_df, test_df)]
    shares = {"teacher": ens.teacher, "tfidf": ens.tfidf, "cnn": ens.word_cnn}
    members["mix at the run's shares"] = [sum(shares[k] * members[k][i] for k in shares if k in members) for i in (0, 1)]
    ceiling = {name: {"val": accuracy(p[0], labels[0]), "test": accuracy(p[1], labels[1])} for name, p in members.items()}

    sequences, train_labels, text_index = encode_train_indexed(tok, train_df, reads)
    transfer_df = load_transfer_split(root / "data" / "transfer" / "texts.parquet")
    transfer, transfer_labels, transfer_index = encode_train_indexed(tok, transfer_df, reads)

    active = [name for name, share in ens.of().items() if share > 0]
    train_sources = {name: source_logits(name, models / STAGES[name] / "train.npz", train_labels, train_df["label"].to_numpy(),
                                         text_index) for name in active}
    transfer_sources = {name: source_logits(name, models / STAGES[name] / "transfer.npz", transfer_labels,
                                            transfer_df["label"].to_numpy(), transfer_index) for name in active}

    runs = []
    for variant in [v.split() for v in args.variants.split(";")]:
        for seed in args.seeds:
            p = load_with_overrides(root / "params.yaml", parse_overrides([*variant, f"train.seed={seed}"]))
            cfg = p.distill
            variant_shares = p.soft_targets.shares.of()
            if [name for name, share in variant_shares.items() if share > 0] != active:
                raise SystemExit("error: a variant may change the shares, not switch a member the run did not score on or off")
            if p.distill.student_kind != params.distill.student_kind:
                raise SystemExit("error: a variant may not change distill.student_kind: the rows were cut for the run's student")
            n = p.transfer_set.rows
            if n > len(transfer):
                raise SystemExit(f"error: transfer_set.rows={n}: the run's transfer set holds {len(transfer)}")
            rows, targets = distillation.with_transfer((sequences, train_labels), combine(variant_shares, train_sources),
                                                       transfer[:n], combine(variant_shares, transfer_sources)[:n])
            start = time.perf_counter()
            if cfg.student_kind == "word_cnn":  # the run's word-CNN, afresh for every variant and seed
                student, metrics = distillation.run_word_cnn(cfg, p.train, load_textcnn(models / "cnn" / "model.safetensors")[0],
                                                             rows, targets, student_scorers[0], NullTracker(), bag_lr=p.cnn.bag_lr_scale)
            else:
                student, metrics = distillation.distill_transformer(cfg, p.train, teacher, head_cfg, p.student_config(tok.get_vocab_size()), rows, targets,
                                               student_scorers[0], NullTracker())
            runs.append({"variant": " ".join(variant) or "the run's params", "seed": seed,
                         "val": accuracy(student_scorers[0].logits(student), labels[0]),
                         "test": accuracy(student_scorers[1].logits(student), labels[1]),
                         "seconds": time.perf_counter() - start, "steps": metrics["steps"],
                         "non_embedding_params": metrics["student_non_embedding_params"]})
            print(json.dumps(runs[-1]), flush=True)

    print(f"\n| model | val | {params.data.dataset} test of record |\n|---|---|---|")
    for name, row in ceiling.items():
        print(f"| {name} | {row['val']:.2%} | {row['test']:.2%} |")
    for name in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == name]
        print(f"| student: {name} (mean of {len(mine)} seeds) | {np.mean([r['val'] for r in mine]):.2%} | "
              f"{np.mean([r['test'] for r in mine]):.2%} ({', '.join(format(r['test'], '.2%') for r in mine)}) |")
    record = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "root": str(root), "task": params.data.dataset,
              "members": ceiling, "runs": runs}
    with (ROOT / "benchmarks" / "results" / "distill_variants.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
