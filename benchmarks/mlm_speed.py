"""MLM training-step speed and memory: minibert vs transformers.BertForMaskedLM, side by side.

Same shape (BERT-Mini: 4 layers, 256 hidden, 4 heads, vocabulary 16k), same batches of real
IMDb text (batch 32 x 128 tokens, 15 % masked), AdamW, same thread count. Each variant runs in
its own process (clean memory accounting); bf16 autocast and torch.compile (time after
compiling) are measured for ours only: peak resident memory is measured over the timed
steps only (Linux VmHWM after resetting it with /proc/self/clear_refs), above the resident size
after warm-up. Prints a table of ratios against transformers with SDPA attention and writes
benchmarks/results/mlm_speed.json.

    python benchmarks/mlm_speed.py [--threads 2] [--steps 6] [--out benchmarks/results/mlm_speed.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch
from machine import describe

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("hf-sdpa", "hf-eager", "ours-sdpa", "ours-eager", "ours-sdpa-dense", "ours-sdpa-bf16", "ours-sdpa-compiled")
SHAPE = dict(layers=4, hidden=256, heads=4, intermediate=1024, vocab=16000)


def build_batches(path: Path, batch: int, length: int, count: int) -> None:
    """Train a 16k WordPiece on IMDb unlabeled reviews; cut them into length-token sequences."""
    from minibert.masking import mask_tokens
    from minibert.tokenizer import TokenizerConfig, train_wordpiece
    from minibert.windows import chunk_document

    with gzip.open(ROOT.parent / "shared" / "data" / "imdb" / "unsup.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(20000), f)]
    tok = train_wordpiece(iter(texts), TokenizerConfig(vocab_size=SHAPE["vocab"]))
    sequences = []
    for enc in tok.encode_batch(texts[:4000], add_special_tokens=False):
        sequences.extend(s for s in chunk_document(enc.ids, length, 2, 3) if len(s) == length)
    ids = torch.tensor(sequences[: batch * count]).view(count, batch, length)
    gen = torch.Generator().manual_seed(0)
    masked, labels = mask_tokens(ids, ids >= 5, 4, 5, tok.get_vocab_size(), 0.15, gen)
    torch.save({"ids": masked, "labels": labels, "vocab": tok.get_vocab_size()}, path)


def _peak_reset() -> int:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    return _status_kb("VmRSS")


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def make_model(variant: str, vocab: int):
    """(model, step function(ids, labels) -> loss)."""
    if variant.startswith("hf"):
        from transformers import BertConfig, BertForMaskedLM

        cfg = BertConfig(vocab_size=vocab, hidden_size=SHAPE["hidden"], num_hidden_layers=SHAPE["layers"],
                         num_attention_heads=SHAPE["heads"], intermediate_size=SHAPE["intermediate"],
                         attn_implementation=variant.split("-")[1])
        model = BertForMaskedLM(cfg)
        assert model.config._attn_implementation == variant.split("-")[1]
        return model, lambda ids, labels: model(input_ids=ids, labels=labels).loss
    from minibert import ModelConfig, build_mlm
    from minibert.losses import mlm_loss

    cfg = ModelConfig(vocab_size=vocab, hidden_size=SHAPE["hidden"], num_layers=SHAPE["layers"], num_heads=SHAPE["heads"],
                      intermediate_size=SHAPE["intermediate"], attention=variant.split("-")[1])
    model = build_mlm(cfg)
    run = torch.compile(model, dynamic=True) if variant.endswith("compiled") else model  # masked count varies
    if variant.endswith("dense"):
        return model, lambda ids, labels: mlm_loss(run(ids), labels)
    if variant.endswith("bf16"):
        def loss_bf16(ids, labels):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return mlm_loss(run(ids, masked_positions=labels != -100), labels[labels != -100])
        return model, loss_bf16
    return model, lambda ids, labels: mlm_loss(run(ids, masked_positions=labels != -100), labels[labels != -100])


def worker(variant: str, data_path: Path, steps: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = torch.load(data_path, weights_only=True)
    model, loss_of = make_model(variant, data["vocab"])
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i: int) -> None:
        loss = loss_of(data["ids"][i], data["labels"][i])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(2):  # warm-up: allocator, optimizer state, compilation
        step(i)
    base = _peak_reset()
    start = time.perf_counter()
    for i in range(steps):
        step(2 + i)
    seconds = (time.perf_counter() - start) / steps
    tokens = data["ids"].shape[1] * data["ids"].shape[2]
    return {"variant": variant, "step_s": seconds, "tokens_per_s": tokens / seconds,
            "peak_mb": (_status_kb("VmHWM") - base) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--worker", choices=VARIANTS)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mlm_speed.json")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.data, args.steps, args.threads)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "batches.pt"
        build_batches(data, batch=32, length=128, count=args.steps + 2)
        rows = []
        for variant in VARIANTS:
            out = subprocess.run([sys.executable, __file__, "--worker", variant, "--data", str(data), "--steps",
                                  str(args.steps), "--threads", str(args.threads)], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"worker {variant} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ref = next(r for r in rows if r["variant"] == "hf-sdpa")
    print(f"MLM training step, BERT-Mini shape, batch 32 x 128, 15 % masked, {args.threads} threads")
    print(f"{'variant':<17}{'s/step':>8}{'tokens/s':>10}{'speed vs hf-sdpa':>18}{'peak MB':>9}{'memory vs hf-sdpa':>19}")
    for r in rows:
        r["speed_ratio"] = r["tokens_per_s"] / ref["tokens_per_s"]
        r["memory_ratio"] = r["peak_mb"] / ref["peak_mb"]
        print(f"{r['variant']:<17}{r['step_s']:>8.3f}{r['tokens_per_s']:>10.0f}{r['speed_ratio']:>17.2f}x"
              f"{r['peak_mb']:>9.0f}{r['memory_ratio']:>18.2f}x")
    result = {"date": date.today().isoformat(), **describe(), "torch": torch.__version__,
              "threads": args.threads, "steps": args.steps, "shape": SHAPE, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
