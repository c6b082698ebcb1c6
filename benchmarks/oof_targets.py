"""Out-of-fold word-CNN targets and a task-like transfer set: does the student then learn more of its mix?

On a finished pipeline run (``--root``) of a short-text task (one row a text), the student's soft targets on
its training rows come from sources that trained on those rows: the word-CNN fits them to ~100 %, so its
targets there are the labels. This benchmark trains the ``cnn`` stage's word-CNN ``--folds`` times on the
other folds (``pipeline.word_cnn.train_word_cnn``, the run's params) for out-of-fold logits on every training
row, and builds a second transfer set of the run's size: the corpus sentences most like the task's training
texts (a TF-IDF + LR telling training texts from corpus sentences; Moore & Lewis 2010 select data the same
way), scored by the run's teacher, TF-IDF + LR and the folds' averaged word-CNN. Then one word-CNN student a
seed (``pipeline.distillation.run_word_cnn`` from the run's word-CNN, at the run's shares and ``distill``
section) for each of: the run's targets and transfer set; out-of-fold word-CNN targets; out-of-fold and the
task-like transfer set; the run's targets and the task-like set. Validation and the test split of record.
Prints a table and appends one JSON record to benchmarks/results/oof_targets.jsonl.

    python benchmarks/oof_targets.py --root <run> --seeds 0
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
from common import ROOT, accuracy, load_with_overrides
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from minibert.checkpoint import load_model
from minibert.runtime import softmax
from minibert.textcnn import load_textcnn
from minibert.tokenizer import load_tokenizer
from minibert.trainer import NullTracker
from pipeline import distillation
from pipeline.scoring import chunked_logits, teacher_logits, validation
from pipeline.soft_targets import STAGES, combine, log_probabilities
from pipeline.splits import load_split
from pipeline.task import encode_train
from pipeline.tfidf import build_baseline
from pipeline.transfer_texts import CORPUS, labelled_texts, transfer_texts
from pipeline.word_cnn import train_word_cnn

NEGATIVES = 20_000  # corpus sentences the task-vs-corpus classifier learns from


def task_like(pool: list[str], train_texts: list[str], rows: int, seed: int) -> list[str]:
    """The ``rows`` sentences of ``pool`` a TF-IDF + LR scores most like ``train_texts`` (against a sample of the pool)."""
    sample = [pool[i] for i in np.random.default_rng(seed).choice(len(pool), min(NEGATIVES, len(pool)), replace=False)]
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    features = vectorizer.fit_transform(train_texts + sample)
    model = LogisticRegression(C=4.0, max_iter=2000).fit(features, np.r_[np.ones(len(train_texts)), np.zeros(len(sample))])
    score = model.predict_proba(vectorizer.transform(pool))[:, 1]
    return [pool[i] for i in np.argsort(-score, kind="stable")[:rows]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="a finished pipeline run's project folder")
    parser.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",")], default=[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    root, models = args.root, args.root / "models"
    params = load_with_overrides(root / "params.yaml", {})
    task, data = params.cnn_task(), root / "data" / "prepared"
    if params.distill.student_kind != "word_cnn" or params.cnn_task() != params.task:
        raise SystemExit("error: this benchmark takes a run with a word_cnn student reading the teacher's windows")
    tok = load_tokenizer(models / "tokenizer" / "tokenizer.json")
    train_df, val_df, test_df = (load_split(data, s) for s in ("train", "val", "test"))
    sequences, labels = encode_train(tok, train_df, task)
    if len(sequences) != len(train_df):
        raise SystemExit("error: this benchmark takes a task of one row a text (short texts); the run cuts windows")
    scorers = [validation(tok, df, task) for df in (val_df, test_df)]
    num_labels = int(labels.max()) + 1

    run_transfer = pd.read_parquet(root / "data" / "transfer" / "texts.parquet")["text"].tolist()
    pool = transfer_texts(pd.read_parquet(data / CORPUS)["text"].tolist(), labelled_texts(data), 10**9, params.train.seed)
    sets = {"run's": run_transfer, "task-like": task_like(pool, train_df["text"].tolist(), len(run_transfer), params.train.seed)}
    encoded = {name: encode_train(tok, pd.DataFrame({"text": texts, "label": -1}), task)[0] for name, texts in sets.items()}

    vectors = load_model(models / "pretrain" / "model.safetensors")[0].backbone.embeddings.tokens.weight.detach().clone()
    oof = np.zeros((len(sequences), num_labels), np.float32)
    fold_probs = {name: np.zeros((len(rows), num_labels)) for name, rows in encoded.items()}
    folds = StratifiedKFold(args.folds, shuffle=True, random_state=params.train.seed).split(np.zeros(len(labels)), labels)
    for fit_rows, held in folds:
        model, _, _ = train_word_cnn(params.cnn, params.train, vectors, ([sequences[i] for i in fit_rows], labels[fit_rows]),
                                     scorers[0], NullTracker(), num_labels)
        oof[held] = chunked_logits(model, [sequences[i] for i in held], "held-out fold", num_labels)
        for name, rows in encoded.items():
            fold_probs[name] += softmax(chunked_logits(model, rows, "transfer set", num_labels)) / args.folds

    teacher = load_model(models / "finetune" / "model.safetensors")[0]
    baseline = build_baseline(params.baseline, params.train.class_weights).fit(train_df["text"], train_df["label"])
    cnn = load_textcnn(models / "cnn" / "model.safetensors")[0]
    transfer_sources = {name: {"teacher": teacher_logits(teacher, rows, "teacher"),
                               "tfidf": log_probabilities(baseline.predict_proba(sets[name])),
                               "word_cnn": chunked_logits(cnn, rows, "word-CNN", num_labels)} for name, rows in encoded.items()}
    run_train = {name: np.load(models / STAGES[name] / "train.npz")["logits"] for name in STAGES}
    shares = params.soft_targets.shares.of()
    variants = {
        "the run's targets and transfer set": (run_train, "run's", False),
        "out-of-fold word-CNN": ({**run_train, "word_cnn": oof}, "run's", True),
        "out-of-fold, task-like transfer set": ({**run_train, "word_cnn": oof}, "task-like", True),
        "the run's targets, task-like transfer set": (run_train, "task-like", False),
    }
    runs = []
    for name, (train_sources, transfer_name, folded) in variants.items():
        sources = dict(transfer_sources[transfer_name])
        if folded:
            sources["word_cnn"] = log_probabilities(fold_probs[transfer_name])
        rows, targets = distillation.with_transfer((sequences, labels), combine(shares, train_sources), encoded[transfer_name],
                                                   combine(shares, sources))
        for seed in args.seeds:
            shared = dataclasses.replace(params.train, seed=seed)
            student, metrics = distillation.run_word_cnn(params.distill, shared, load_textcnn(models / "cnn" / "model.safetensors")[0],
                                                         rows, targets, scorers[0], NullTracker(), phase=None)
            runs.append({"variant": name, "seed": seed, "val": accuracy(scorers[0].logits(student), scorers[0].labels),
                         "test": accuracy(scorers[1].logits(student), scorers[1].labels), "steps": metrics["steps"]})
            print(json.dumps(runs[-1]), flush=True)

    sources_accuracy = {"word-CNN in sample (train rows)": float((run_train["word_cnn"].argmax(1) == labels).mean()),
                        "word-CNN out of fold (train rows)": float((oof.argmax(1) == labels).mean())}
    print(f"\n{sources_accuracy}; task-like transfer set, first sentences: {sets['task-like'][:5]}")
    print(f"\n| student (one word-CNN, {params.data.dataset}) | val | test of record |\n|---|---|---|")
    for name in variants:
        mine = [r for r in runs if r["variant"] == name]
        print(f"| {name} | {np.mean([r['val'] for r in mine]):.2%} | {np.mean([r['test'] for r in mine]):.2%} |")
    record = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "root": str(root), "task": params.data.dataset,
              "folds": args.folds, "sources": sources_accuracy, "task_like_head": sets["task-like"][:20], "runs": runs,
              "seconds": time.perf_counter() - start}
    with (ROOT / "benchmarks" / "results" / "oof_targets.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
