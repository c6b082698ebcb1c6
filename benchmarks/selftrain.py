"""Self-training on IMDb sentences: does a teacher's labelling of in-domain whole sentences lift SST-2 dev?

SST-2's training rows are mostly short phrases; GLUE dev is whole sentences. This trial lets the
default recipe's teacher (IMDb phase, then SST-2, from ``--encoder``) label whole sentences cut
from the labelled IMDb training reviews, keeps those it labels with confidence >= ``--threshold``
(and, with ``--agree``, only where its label matches the review's), balances the two classes,
and trains a student of the same shape from the teacher's IMDb-phase weights: on the pseudo-labelled
sentences, then on SST-2 (or on both mixed, ``--mix``). It scores teacher and student on GLUE dev
and appends one JSON record to benchmarks/results/selftrain.jsonl.

    python benchmarks/selftrain.py --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json \\
        --encoder <run>/models/pretrain/model.safetensors --work /tmp/selftrain --tag mix_t07 --mix --threshold 0.7
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
from common import ROOT, PrintingTracker, add_params_args, load_with_overrides, parse_overrides

from minibert.checkpoint import load_model, save_model
from minibert.inference import predict_logits
from minibert.model import SequenceClassifier
from minibert.runtime import softmax
from minibert.tokenizer import encode, load_tokenizer
from minibert.trainer import NullTracker
from pipeline.classifier_loop import train_classifier
from pipeline.metrics import classification_metrics
from pipeline.scoring import validation
from pipeline.splits import load_split, prepared
from pipeline.task import encode_train
from pipeline.teacher import build, finetune_loop, head_config, transfer_phase, transfer_splits
from pipeline.transfer_texts import review_sentences


def select(pred: np.ndarray, conf: np.ndarray, review_labels: np.ndarray, threshold: float, agree: bool,
           limit: int) -> np.ndarray:
    """Row indices kept for the student: confident, optionally agreeing with the review, classes balanced."""
    keep = conf >= threshold
    if agree:
        keep &= pred == review_labels
    kept = np.flatnonzero(keep)
    pos, neg = kept[pred[kept] == 1], kept[pred[kept] == 0]
    n = min(len(pos), len(neg), limit // 2)
    return np.concatenate([pos[:n], neg[:n]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_params_args(parser)
    parser.add_argument("--encoder", type=Path, required=True, help="the pretrained MLM checkpoint")
    parser.add_argument("--work", type=Path, required=True, help="teacher checkpoints and labels, reused across trials")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--agree", action="store_true", help="keep a sentence only where the teacher agrees with its review")
    parser.add_argument("--max-sentences", type=int, default=60_000, help="pseudo-labelled rows at most (3x are labelled)")
    parser.add_argument("--pseudo-epochs", type=float, default=1.0)
    parser.add_argument("--mix", action="store_true", help="one phase on SST-2 + pseudo rows instead of two")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_with_overrides(args.params, parse_overrides(args.overrides), args.profile)
    cfg, shared, task = params.finetune, params.train, params.task
    tok = load_tokenizer(args.tokenizer)
    train = encode_train(tok, load_split(args.data, "train"), task)
    val = validation(tok, load_split(args.data, "val"), task)
    test = validation(tok, load_split(args.data, "test"), task)
    record: dict = {"tag": args.tag, "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "args": {k: str(v) for k, v in vars(args).items()}}
    start = time.perf_counter()

    def note(**fields: object) -> None:
        record.update(fields)
        print(json.dumps(fields, default=str), flush=True)

    def dev(model: SequenceClassifier) -> float:
        return classification_metrics(test[1], test[0](model))["accuracy"]

    args.work.mkdir(parents=True, exist_ok=True)
    head = head_config(cfg, prepared(args.data).num_labels)
    teacher_path, imdb_path = args.work / "teacher.safetensors", args.work / "teacher_imdb.safetensors"
    if not teacher_path.exists():
        torch.manual_seed(shared.seed)
        mlm, model_cfg, _ = load_model(args.encoder)
        teacher = build(cfg, model_cfg, mlm.backbone, head.num_labels)
        tracker = PrintingTracker(NullTracker(), "teacher")
        teacher, transfer = transfer_phase(teacher, cfg, shared, task, tok, transfer_splits(args.data), tracker)
        save_model(teacher, model_cfg, imdb_path, head)
        teacher, metrics = train_classifier(teacher, finetune_loop(cfg, shared), train, val, tracker)
        save_model(teacher, model_cfg, teacher_path, head)
        note(teacher_val=metrics["val_accuracy"], teacher_train_s=metrics["train_seconds"] + transfer["transfer_train_seconds"])
    teacher, model_cfg, _ = load_model(teacher_path)
    note(teacher_dev=dev(teacher))

    imdb = load_split(args.data, "train", intermediate=True)  # the intermediate task: IMDb for SST-2
    pairs = [(s, label) for text, label in zip(imdb["text"], imdb["label"]) for s in review_sentences(text)]
    order = np.random.default_rng(0).permutation(len(pairs))[: 3 * args.max_sentences]
    sentences = [pairs[i][0] for i in order]
    review_labels = np.array([pairs[i][1] for i in order])
    ids = encode(tok, sentences, task.max_length)
    cache = args.work / f"pseudo_logits_{len(order)}.npy"
    labelling = time.perf_counter()
    if cache.exists():
        logits = np.load(cache)
    else:
        logits = predict_logits(teacher, ids, 256)
        np.save(cache, logits)
    prob = softmax(logits)
    pred, conf = prob.argmax(1), prob.max(1)
    rows = select(pred, conf, review_labels, args.threshold, args.agree, args.max_sentences)
    note(sentences=len(sentences), label_s=time.perf_counter() - labelling, pseudo_rows=len(rows),
         teacher_agrees_with_review=float((pred == review_labels).mean()),
         pseudo_agree_with_review=float((pred[rows] == review_labels[rows]).mean()) if len(rows) else None)
    pseudo = ([ids[i] for i in rows], pred[rows])

    torch.manual_seed(shared.seed + 1)
    student, _, _ = load_model(imdb_path)
    tracker = PrintingTracker(NullTracker(), "student")
    if args.mix:
        mixed = (train[0] + pseudo[0], np.concatenate([train[1], pseudo[1]]))
        student, metrics = train_classifier(student.train(), finetune_loop(cfg, shared), mixed, val, tracker)
        note(student_val=metrics["val_accuracy"], student_train_s=metrics["train_seconds"], student_steps=metrics["steps"])
    else:
        phase = dataclasses.replace(cfg, epochs=args.pseudo_epochs, time_budget_min=None)
        student, metrics = train_classifier(student.train(), finetune_loop(phase, shared), pseudo, val, tracker, name="pseudo")
        note(pseudo_val=metrics["val_accuracy"], pseudo_train_s=metrics["train_seconds"], pseudo_dev=dev(student))
        student, metrics = train_classifier(student.train(), finetune_loop(cfg, shared), train, val, tracker)
        note(student_val=metrics["val_accuracy"], student_train_s=metrics["train_seconds"])
    note(student_dev=dev(student), total_s=time.perf_counter() - start)
    results = ROOT / "benchmarks" / "results" / "selftrain.jsonl"
    with open(results, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


if __name__ == "__main__":
    main()
