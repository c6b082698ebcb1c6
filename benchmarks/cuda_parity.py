"""CUDA vs CPU parity of the paths the GPU profile runs, in seconds: a check before a timed GPU run.

Same weights, same inputs, fp32 with TF32 off, dropout off: the classifier's logits (padded
batch), the sparse MLM head's logits at masked positions, sliding-window document logits
(``minibert.inference.predict_documents``), and three optimiser steps of ``minibert.trainer.fit``
(the weights after them). Also, on CUDA only: sdpa vs eager attention, and bf16 autocast vs fp32
(a looser bound: bf16 keeps 8 bits of mantissa). Prints one JSON line with every max |diff| and
its bound; exits 1 if a bound is broken, 0 (with ``"skipped"``) on a machine without CUDA.

    python benchmarks/cuda_parity.py --out parity.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minibert.attention import ATTENTION
from minibert.batching import EpochStream, pad_batch
from minibert.config import ClassifierConfig, ModelConfig
from minibert.inference import predict_documents
from minibert.model import build_classifier, build_mlm
from minibert.train_config import LoopConfig, OptimConfig
from minibert.trainer import NullTracker, fit

BOUNDS = {"classifier_logits": 1e-4, "mlm_logits": 1e-3, "document_logits": 1e-4, "weights_after_3_steps": 1e-4,
          "sdpa_vs_eager_cuda": 1e-4, "bf16_vs_fp32_cuda": 0.1}


def max_diff(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    a, b = torch.as_tensor(a).detach().float().cpu(), torch.as_tensor(b).detach().float().cpu()
    return float((a - b).abs().max())


def sequences(rng: np.random.Generator, n: int, vocab: int, low: int, high: int) -> list[list[int]]:
    """``n`` random id sequences of lengths in [low, high), [CLS]=2 ... [SEP]=3 around ids >= 5."""
    return [[2, *rng.integers(5, vocab, size=int(rng.integers(low, high))).tolist(), 3] for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda", help="compare the CPU against this device (cpu: exercise the script)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}), flush=True)
        return
    start = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cuda = torch.device(args.device)
    cfg = ModelConfig.preset("mini", vocab_size=1000, hidden_dropout=0.0, attention_dropout=0.0, max_positions=128)
    head = ClassifierConfig(num_labels=2, pooling="mean", dropout=0.0)
    rng = np.random.default_rng(0)
    seqs = sequences(rng, 16, cfg.vocab_size, 3, 60)
    ids, mask = pad_batch(seqs, pad_id=0)
    diffs: dict[str, float] = {}

    torch.manual_seed(0)
    cpu_model = build_classifier(cfg, head).eval()
    gpu_model = copy.deepcopy(cpu_model).to(cuda)
    with torch.no_grad():
        reference = cpu_model(ids, mask)
        diffs["classifier_logits"] = max_diff(reference, gpu_model(ids.to(cuda), mask.to(cuda)))
        eager = copy.deepcopy(gpu_model)
        for layer in eager.backbone.encoder.layers:
            layer.attention.core = ATTENTION["eager"]
        diffs["sdpa_vs_eager_cuda"] = max_diff(gpu_model(ids.to(cuda), mask.to(cuda)), eager(ids.to(cuda), mask.to(cuda)))
        with torch.autocast(cuda.type, dtype=torch.bfloat16):
            diffs["bf16_vs_fp32_cuda"] = max_diff(reference, gpu_model(ids.to(cuda), mask.to(cuda)))
        docs = [s[1:-1] * 2 for s in seqs[:8]]  # most longer than one window: several windows a document
        diffs["document_logits"] = max_diff(predict_documents(cpu_model, docs, 32, 24, "mean", 8, 2, 3),
                                            predict_documents(gpu_model, docs, 32, 24, "mean", 8, 2, 3))

        torch.manual_seed(0)
        cpu_mlm = build_mlm(cfg).eval()
        gpu_mlm = copy.deepcopy(cpu_mlm).to(cuda)
        positions = (torch.rand(ids.shape) < 0.15) & mask.bool()
        diffs["mlm_logits"] = max_diff(cpu_mlm(ids, mask, masked_positions=positions),
                                       gpu_mlm(ids.to(cuda), mask.to(cuda), masked_positions=positions.to(cuda)))

    labels = torch.as_tensor(rng.integers(0, 2, size=len(seqs)))

    def stream() -> EpochStream:
        return EpochStream([len(s) for s in seqs], 8, 0, lambda index, gen: (*pad_batch([seqs[i] for i in index], 0),
                                                                                labels[index]))

    def step(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, int]:
        batch_ids, batch_mask, batch_labels = batch
        return F.cross_entropy(model(batch_ids, batch_mask), batch_labels), int(batch_mask.sum())

    trained = {}
    for name, model in (("cpu", copy.deepcopy(cpu_model)), ("cuda", copy.deepcopy(cpu_model).to(cuda))):
        fit(model, stream(), step, OptimConfig(lr=1e-3, warmup_ratio=0.0), LoopConfig(max_steps=3, log_every=3), NullTracker())
        trained[name] = model
    diffs["weights_after_3_steps"] = max(max_diff(p, q) for p, q in zip(trained["cpu"].parameters(), trained["cuda"].parameters()))

    failed = sorted(k for k, v in diffs.items() if not v <= BOUNDS[k])
    name = torch.cuda.get_device_name(cuda) if cuda.type == "cuda" else str(cuda)
    result = {"cuda_parity": {"device_name": name, "torch": torch.__version__,
                              "max_abs_diff": diffs, "bounds": BOUNDS, "failed": failed,
                              "seconds": round(time.perf_counter() - start, 2)}}
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
