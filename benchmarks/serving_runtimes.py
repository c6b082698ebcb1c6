"""Serving runtimes side by side: the deployed student and the teacher on every inference path this host has.

Reads a finished pipeline's artifacts (``--root``: models/, data/prepared, data/transfer) and measures, in one
run on ``--threads`` threads at batch 32:

- graphs: the portable fp32 graph (``models/export/student.onnx``), the deployed graph the quantize stage wrote
  (``models/quantize/student_int8.onnx``), the chain deployed before it (ORT's dynamic int8 of the fused graph,
  ``quantize_onnx_int8``, built here), calibrated static int8 built here from the portable graph with the library's
  ``quantize_onnx_static_int8`` (ORT QDQ, calibration windows from the training split; convolutions and
  matmuls with the embeddings in fp32, and the same with ONNX Runtime's int8 Gather) and, with ``--nncf``, NNCF's
  static int8 of the same graph;
  the teacher exported here (portable fp32 and static int8), and the teacher in torch (fp32 eager, bf16 autocast);
- paths: ONNX Runtime's CPU provider and OpenVINO directly (f32, bf16); with ``--routes`` also ONNX Runtime with
  the OpenVINO execution provider (the ``onnxruntime-ep-openvino`` plugin; f32 and bf16 inference precision):
  ``pip install -e '.[bench]'`` adds the plugin and NNCF; a path or graph that does not load is reported, not fatal;
- columns: texts/s model only (the texts' windows pre-tokenized, length-sorted batches of 32) and end to end
  (raw text in, logits out: ``minibert.runtime.TextClassifier``, tokenizer included), the median of ``--passes``
  passes over ``--texts`` distinct transfer-set sentences (nothing cached between passes: every end-to-end pass
  tokenizes again), each variant once a pass, in turn; p50 ms of one text on one thread (``--latency-texts`` texts,
  end to end); accuracy on the test split of record and argmax agreement with the torch fp32 model on it;
- the host: the path the runtime takes for the deployed graph under ``auto`` (``auto_path``), OpenVINO's
  capabilities and the kernels it runs the deployed graph with, and the instruction-set caps in effect
  (``machine.ISA_CAPS``): run under ``ONEDNN_MAX_CPU_ISA=AVX2 OV_CPU_MAX_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
  MKL_ENABLE_INSTRUCTIONS=AVX2``, an AVX-512 host stands in for an AVX2-only one for OpenVINO and torch (not for
  ONNX Runtime, whose chain then keeps AVX-512: a bound that favours the chain before).

    python benchmarks/serving_runtimes.py --root <run> [--texts 12000] [--passes 5] [--out results/serving_runtimes.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from machine import describe

from minibert.batching import batched_logits, pad_ids
from minibert.checkpoint import load_model, read_contract
from minibert.classifiers import load_classifier
from minibert.contract import stamp_onnx
from minibert.engines import OUTPUT_NAME, Engine, cpu_has_bf16, feed, load_engine
from minibert.export import export_onnx
from minibert.precision import cpu_has_native_bf16
from minibert.quantize import quantize_onnx_int8, quantize_onnx_static_int8
from minibert.runtime import RuntimeConfig, TextClassifier
from minibert.tokenizer import CLS, PAD, SEP, load_tokenizer
from minibert.windows import aggregate_windows, document_windows
from pipeline.splits import load_split
from pipeline.task import encode_documents

BATCH = 32
CALIBRATION_WINDOWS = 512
SETTLE_S = 0.3  # idle worker threads of the previous run stop spinning first
Logits = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (ids, mask) -> (B, L)


def ort_openvino_engine(path: Path, threads: int, precision: str) -> Engine:
    """The graph through ONNX Runtime with the OpenVINO execution provider (the plugin package)."""
    import onnxruntime as ort
    import onnxruntime_ep_openvino as plugin

    if plugin.get_ep_name() not in {d.ep_name for d in ort.get_ep_devices()}:
        ort.register_execution_provider_library("openvino_ep", plugin.get_library_path())
    cpu = [d for d in ort.get_ep_devices() if d.ep_name == plugin.get_ep_name() and d.ep_metadata.get("ov_device") == "CPU"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    config = {"CPU": {"INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[precision],
                      "INFERENCE_NUM_THREADS": str(threads), "PERFORMANCE_HINT": "LATENCY"}}
    options.add_provider_for_devices(cpu, {"load_config": json.dumps(config)})
    session = ort.InferenceSession(str(path), sess_options=options)
    if session.get_providers()[0] != plugin.get_ep_name():
        raise RuntimeError(f"the OpenVINO execution provider did not take {path.name}")
    return Engine(f"ort-openvino-ep/{precision}", frozenset(i.name for i in session.get_inputs()),
                  int(session.get_outputs()[0].shape[-1]), dict(session.get_modelmeta().custom_metadata_map),
                  lambda f: session.run([OUTPUT_NAME], f)[0], session)


def engine_on(path: Path, route: str, threads: int) -> Engine:
    runtime, _, precision = route.partition("/")
    if precision == "bf16" and not cpu_has_bf16():  # OpenVINO would compute in f32 under a bf16 hint
        raise RuntimeError("OpenVINO reports no native bf16 on this CPU (or under its ISA cap)")
    if runtime == "ort-openvino-ep":
        return ort_openvino_engine(path, threads, precision)
    return load_engine(path, route, threads=threads)


@dataclass
class Variant:
    model: str  # student | teacher
    graph: str  # what runs: fp32, int8 dynamic, int8 static, ... or torch
    route: str  # runtime/precision
    windows: Logits  # model only, --threads
    texts: Callable[[list[str]], np.ndarray]  # end to end, --threads
    single: Callable[[list[str]], np.ndarray]  # end to end, 1 thread
    size_mb: float


def torch_logits(model: torch.nn.Module, bf16: bool) -> Logits:
    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return model(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()
    return run


def end_to_end(tok, run: Logits, windows, pad_id: int) -> Callable[[list[str]], np.ndarray]:
    """Raw texts -> logits through ``run`` as the runtime reads them (for the torch models)."""
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)

    def texts(batch: list[str]) -> np.ndarray:
        cut, counts = document_windows(encode_documents(tok, batch), windows.max_length, windows.stride, cls_id, sep_id)
        return aggregate_windows(batched_logits(run, cut, BATCH, pad_id), counts, windows.aggregate)
    return texts


def openvino_kernels(graph: Path, windows: list, pad_id: int, threads: int) -> dict[str, object]:
    """OpenVINO's optimization capabilities here and the kernels its CPU plugin runs ``graph`` with in f32 (one
    call on ``windows``): under an ISA cap (machine.ISA_CAPS) none should name avx512 or amx."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(graph)), "CPU", {
        "PERF_COUNT": True, "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    request.infer(feed({i.get_any_name() for i in compiled.inputs}, *pad_ids(windows, pad_id)))
    kernels = sorted({p.exec_type for p in request.profiling_info if p.status.name == "EXECUTED"} - {"undef"})
    return {"openvino_capabilities": core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"), "openvino_kernels": kernels}


def timed(fn: Callable[[], object]) -> float:
    time.sleep(SETTLE_S)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--texts", type=int, default=12000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--latency-texts", type=int, default=300)
    parser.add_argument("--models", default="student,teacher")
    parser.add_argument("--routes", default="onnxruntime/fp32,openvino/fp32,openvino/bf16",
                        help="also ort-openvino-ep/fp32,ort-openvino-ep/bf16 (the ORT OpenVINO EP: needs the bench extra)")
    parser.add_argument("--teacher-routes", default="onnxruntime/fp32,openvino/fp32,openvino/bf16")
    parser.add_argument("--nncf", action="store_true", help="NNCF's static int8 too (51 %% accuracy on the word-CNN)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "serving_runtimes.json")
    args = parser.parse_args()
    root, threads = args.root, args.threads
    torch.set_num_threads(threads)
    tok_path = root / "models/tokenizer/tokenizer.json"
    tok = load_tokenizer(tok_path)
    pad_id, cls_id, sep_id = tok.token_to_id(PAD), tok.token_to_id(CLS), tok.token_to_id(SEP)
    sentences = pd.read_parquet(root / "data/transfer/texts.parquet")["text"].drop_duplicates()
    texts = sentences.sample(n=min(args.texts, len(sentences)), random_state=0).tolist()
    test = load_split(root / "data/prepared", "test")
    test_texts, labels = test["text"].tolist(), test["label"].to_numpy()
    latency_texts = texts[: args.latency_texts]
    train = load_split(root / "data/prepared", "train")["text"].sample(n=CALIBRATION_WINDOWS, random_state=0).tolist()
    tmp = Path(tempfile.mkdtemp(prefix="serving_runtimes."))
    deployed = root / "models/quantize/student_int8.onnx"
    # the bf16 torch model where the CPU computes bf16 natively, and torch's kernels are not capped below AVX-512
    # (machine.ISA_CAPS: an AVX-512 host standing in for an AVX2-only one, where bf16 is emulated, 21x slower)
    torch_bf16 = cpu_has_native_bf16() and torch.backends.cpu.get_cpu_capability() != "AVX2"

    variants: list[Variant] = []
    failures: dict[str, str] = {}
    reference: dict[str, np.ndarray] = {}  # model -> torch fp32 test logits
    windows_of: dict[str, list] = {}
    models = args.models.split(",")
    for name in models:
        checkpoint = root / ("models/distill/model.safetensors" if name == "student" else "models/finetune/model.safetensors")
        reads = read_contract(checkpoint).windows
        model = load_classifier(checkpoint) if name == "student" else load_model(checkpoint)[0]
        model.eval()
        cut, _ = document_windows(encode_documents(tok, texts), reads.max_length, reads.stride, cls_id, sep_id)
        windows_of[name] = cut
        calibration, _ = document_windows(encode_documents(tok, train), reads.max_length, reads.stride, cls_id, sep_id)
        reference[name] = end_to_end(tok, torch_logits(model, False), reads, pad_id)(test_texts)
        if name == "student":
            portable = root / "models/export/student.onnx"
            graphs = {"fp32": portable,  # the chain before this benchmark: ORT dynamic int8 of the fused graph
                      "int8 dynamic (deployed before)": quantize_onnx_int8(root / "models/export/student_fused.onnx",
                                                                           tmp / "student_dynamic.onnx"),
                      "deployed (quantize stage)": deployed}
        else:
            portable = export_onnx(model, tmp / "teacher.onnx")
            graphs = {"fp32": portable}
        if name == "teacher":  # the student's static int8 is the deployed graph (its first tier: int8 embedding rows)
            graphs["int8 static (Conv+MatMul)"] = quantize_onnx_static_int8(portable, tmp / f"{name}_static.onnx",
                                                                            calibration, pad_id)
        else:  # the deployed graph without its int8 embedding rows, and with ONNX Runtime's own Gather quantisation
            graphs["int8 static, fp32 embeddings"] = quantize_onnx_static_int8(portable, tmp / f"{name}_static.onnx",
                                                                               calibration, pad_id)
            graphs["int8 static, ORT's int8 Gather"] = quantize_onnx_static_int8(
                portable, tmp / f"{name}_static_gather.onnx", calibration, pad_id, op_types=("Conv", "MatMul", "Gather"))
        try:
            if not args.nncf:
                raise RuntimeError("not asked for (--nncf)")
            import nncf
            import onnx

            data = nncf.Dataset([feed({"input_ids", "attention_mask"}, *pad_ids(calibration[i:i + BATCH], pad_id))
                                 for i in range(0, len(calibration), BATCH)])
            onnx.save(nncf.quantize(onnx.load(str(portable)), data, subset_size=len(calibration) // BATCH + 1),
                      str(tmp / f"{name}_nncf.onnx"))
            graphs["int8 static (NNCF)"] = tmp / f"{name}_nncf.onnx"
        except Exception as err:  # noqa: BLE001 - a candidate that cannot be built is reported, not fatal
            failures[f"{name} int8 static (NNCF)"] = f"{type(err).__name__}: {err}"[:300]
        for path in graphs.values():
            if path.parent == tmp:  # what is built here carries the model's contract as the pipeline's graphs do
                stamp_onnx(path, read_contract(checkpoint))
        for bf16 in (False, True) if torch_bf16 else (False,):
            run = torch_logits(model, bf16)
            variants.append(Variant(name, "torch", "torch/bf16" if bf16 else "torch/fp32", run,
                                    end_to_end(tok, run, reads, pad_id), end_to_end(tok, run, reads, pad_id),
                                    checkpoint.stat().st_size / 1e6))
        for graph, path in graphs.items():
            for route in (args.routes if name == "student" else args.teacher_routes).split(","):
                try:
                    batched = TextClassifier(tok, engine_on(path, route, threads), RuntimeConfig(batch_size=BATCH))
                    single = TextClassifier(tok, engine_on(path, route, 1), RuntimeConfig(batch_size=BATCH))
                except Exception as err:  # noqa: BLE001 - a path this graph cannot take is reported
                    failures[f"{name} {graph} on {route}"] = f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}"[:300]
                    continue
                variants.append(Variant(name, graph, route, batched.engine, batched.logits, single.logits,
                                        path.stat().st_size / 1e6))

    rows = []
    for v in variants:
        v.texts(texts[:BATCH])  # warm-up
        test_logits = v.texts(test_texts)
        rows.append({"model": v.model, "graph": v.graph, "route": v.route, "size_mb": round(v.size_mb, 2),
                     "test_accuracy": float((test_logits.argmax(1) == labels).mean()),
                     "argmax_agreement_torch_fp32": float((test_logits.argmax(1) == reference[v.model].argmax(1)).mean()),
                     "max_abs_diff_torch_fp32": float(np.abs(test_logits - reference[v.model]).max()),
                     "model_only_s": [], "end_to_end_s": []})
    for _ in range(args.passes):
        for v, row in zip(variants, rows):
            torch.set_num_threads(threads)
            row["model_only_s"].append(timed(lambda v=v: batched_logits(v.windows, windows_of[v.model], BATCH, pad_id)))
            row["end_to_end_s"].append(timed(lambda v=v: v.texts(texts)))
    for v, row in zip(variants, rows):
        torch.set_num_threads(1)
        v.single(latency_texts[:1])
        seconds = []
        for text in latency_texts:
            start = time.perf_counter()
            v.single([text])
            seconds.append(time.perf_counter() - start)
        row["p50_ms_1_text_1_thread"] = 1000 * statistics.median(seconds)
        row["model_only_texts_per_s"] = len(texts) / statistics.median(row["model_only_s"])
        row["end_to_end_texts_per_s"] = len(texts) / statistics.median(row["end_to_end_s"])
    torch.set_num_threads(threads)
    today = next(r for r in rows if r["model"] == models[0] and r["graph"].startswith(
        "int8 dynamic" if models[0] == "student" else "fp32") and r["route"] == "onnxruntime/fp32")
    for row in rows:
        row["model_only_vs_today"] = row["model_only_texts_per_s"] / today["model_only_texts_per_s"]
        row["end_to_end_vs_today"] = row["end_to_end_texts_per_s"] / today["end_to_end_texts_per_s"]
    # the path the runtime takes here under auto, and what OpenVINO runs the deployed graph with
    host = {"auto_path": TextClassifier.from_files(tok_path, deployed, RuntimeConfig(threads=threads)).path,
            **openvino_kernels(deployed, windows_of["student"][:BATCH], pad_id, threads)} if "student" in models else {}
    record = {"date": date.today().isoformat(), **describe(), **host, "python": platform.python_version(),
              "threads": threads, "batch": BATCH, "texts": len(texts), "passes": args.passes,
              "mean_tokens": float(np.mean([len(w) for w in windows_of[models[0]]])), "root": str(root),
              "today": f"{today['model']} {today['graph']} on {today['route']}", "rows": rows, "not_run": failures}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{'model':8} {'graph':30} {'route':22} {'acc':>6} {'agree':>6} {'model/s':>8} {'e2e/s':>8} {'x':>5} {'p50ms':>6}")
    for r in rows:
        print(f"{r['model']:8} {r['graph']:30} {r['route']:22} {100 * r['test_accuracy']:6.2f} "
              f"{100 * r['argmax_agreement_torch_fp32']:6.2f} {r['model_only_texts_per_s']:8.0f} "
              f"{r['end_to_end_texts_per_s']:8.0f} {r['end_to_end_vs_today']:5.2f} {r['p50_ms_1_text_1_thread']:6.2f}")
    for key, why in failures.items():
        print(f"not run: {key}: {why}")
    print(host)


if __name__ == "__main__":
    main()
