"""Training-step time in fp32 vs bf16 autocast on this machine, and what ``precision: auto`` picks.

The default profile's encoder and batch shapes, on real text: fine-tuning steps on SST-2 training
sentences (batch 32, up to 64 tokens) and IMDb reviews (batch 32 x 128, the IMDb phase), and MLM
steps on corpus sequences (batch 64 x 128, 15 % masked), each through ``minibert.trainer.fit``
with the pipeline's own step functions; distillation steps (the 2-layer student and the teacher's
forward pass, batch 32 on SST-2); and the teacher's inference as the ``teacher_logits`` stage runs it
(``predict_logits``, batches of 128, seconds a batch). bf16 autocast pays only where bf16 is native
(AVX512-BF16, AMX, GPUs); elsewhere oneDNN emulates it. Prints a table of bf16 / fp32 ratios and
writes ``benchmarks/results/precision_speed.json``.

    python benchmarks/precision_speed.py --data <run>/data/prepared --tokenizer <run>/models/tokenizer/tokenizer.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch
from common import step_gaps
from machine import describe

from minibert.config import ClassifierConfig
from minibert.distill import Distiller, init_student_from_teacher
from minibert.inference import predict_logits
from minibert.model import build_classifier, build_mlm
from minibert.precision import cpu_has_native_bf16, resolve_precision
from minibert.tokenizer import CLS, SEP, load_tokenizer
from minibert.train_config import LoopConfig
from pipeline import pretraining
from pipeline.classifier_loop import classify_step, labelled_stream
from pipeline.distillation import kd_step
from pipeline.io import read_table
from pipeline.params import load_params

ROOT = Path(__file__).resolve().parent.parent


def step_seconds(model: torch.nn.Module, batches, loss_fn, optim, precision: str, steps: int) -> float:
    """Median seconds of ``steps`` timed steps, after one untimed warm-up step."""
    return float(np.median(step_gaps(model, batches, loss_fn, optim, LoopConfig(max_steps=steps + 1, precision=precision))))


def inference_seconds(model: torch.nn.Module, sequences: list[list[int]], precision: str, batch_size: int = 128) -> float:
    """Seconds a batch of ``predict_logits`` over ``sequences``, after one untimed warm-up batch."""
    predict_logits(model.eval(), sequences[:batch_size], batch_size, precision=precision)
    start = time.perf_counter()
    predict_logits(model, sequences, batch_size, precision=precision)
    return (time.perf_counter() - start) / -(-len(sequences) // batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "prepared")
    parser.add_argument("--tokenizer", type=Path, default=ROOT / "models" / "tokenizer" / "tokenizer.json")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps a variant (bf16 emulated: ~30 s each)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "precision_speed.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params(ROOT / "params.yaml")
    tok = load_tokenizer(args.tokenizer)
    model_cfg = params.model_config(tok.get_vocab_size())
    fine, dis, shared = params.finetune, params.distill, params.train
    head = ClassifierConfig(pooling=fine.pooling)  # every classifier here: the teacher's head, and the student's

    def rows(name: str, max_length: int) -> tuple[list[list[int]], np.ndarray]:
        table = read_table(args.data / name, ["text", "label"]).head(32 * (args.steps + 2) * 4)
        ids = [e.ids[:max_length] for e in tok.encode_batch(table["text"].tolist())]
        return ids, table["label"].to_numpy()

    sst2 = rows("train.parquet", 64)  # the task's rows; the IMDb case reads its intermediate task's (the default data)
    cases = {
        "finetune SST-2, 32 x <= 64": ("classify", sst2),
        "finetune IMDb, 32 x 128": ("classify", rows("intermediate_train.parquet", 128)),
        "distill SST-2, 32 x <= 64": ("distill", sst2),
        "teacher inference SST-2, 128 x <= 64": ("infer", sst2),
    }
    corpus = read_table(args.data / "corpus.parquet", ["text"])["text"].tolist()[:4000]
    pre = dataclasses.replace(params.pretrain, batch_size=64)
    cases["MLM, 64 x 128"] = ("mlm", pretraining.build_sequences(pretraining.encode_documents(tok, corpus), 128,
                                                                  64 * (args.steps + 2), 1, tok.token_to_id(CLS), tok.token_to_id(SEP)))

    results = []
    for name, (kind, data) in cases.items():
        row = {"case": name}
        for precision in ("fp32", "bf16"):
            torch.manual_seed(0)
            if kind == "infer":
                row[precision] = inference_seconds(build_classifier(model_cfg, head), data[0], precision)
                continue
            if kind == "classify":
                model = build_classifier(model_cfg, head)
                batches, loss_fn, optim = labelled_stream(data[0], data[1], 32, 0), classify_step, shared.optim(fine.lr, fine.warmup_ratio)
            elif kind == "distill":
                teacher = build_classifier(model_cfg, head).eval()
                student = build_classifier(params.student_config(tok.get_vocab_size()), head)
                init_student_from_teacher(student, teacher)
                model = Distiller(student, teacher, dis.hidden_weight, dis.attention_weight)
                targets = np.concatenate([data[1][:, None], np.zeros((len(data[1]), 2))], axis=1).astype(np.float32)
                batches, optim = labelled_stream(data[0], targets, dis.batch_size, 0), shared.optim(dis.lr, dis.warmup_ratio)
                loss_fn = functools.partial(kd_step, temperature=dis.temperature, alpha=dis.alpha)
            else:
                model = build_mlm(model_cfg)
                batches, loss_fn = pretraining.batch_stream(data, pre, model_cfg.vocab_size, shared.seed), pretraining.mlm_step
                optim = shared.optim(pre.lr, pre.warmup_ratio)
            row[precision] = step_seconds(model, batches, loss_fn, optim, precision, args.steps)
        row["bf16_over_fp32"] = row["bf16"] / row["fp32"]
        results.append(row)
        print(f"{name:28s} fp32 {row['fp32']:7.3f} s  bf16 {row['bf16']:7.3f} s  bf16/fp32 {row['bf16_over_fp32']:6.2f}x",
              flush=True)
    record = {"date": date.today().isoformat(), **describe(), "native_bf16": cpu_has_native_bf16(),
              "auto_resolves_to": resolve_precision("auto", torch.device("cpu")), "threads": args.threads,
              "torch": torch.__version__, "steps": args.steps, "results": results}
    print("| step (inference: a batch) | fp32 s | bf16 autocast s | bf16 / fp32 |\n|---|---|---|---|")
    for row in results:
        print(f"| {row['case']} | {row['fp32']:.3f} | {row['bf16']:.3f} | {row['bf16_over_fp32']:.2f}x |")
    print(f"native bf16: {record['native_bf16']} ({record['cpu_capability']}); precision auto -> {record['auto_resolves_to']}")
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
