"""The served model under load: ``mlflow models serve`` on loopback, ``--clients`` concurrent clients for ``--seconds``.

Saves the deployed graph of a finished pipeline run (``--root``: models/quantize/student_int8.onnx and the
tokenizer) as the MLflow pyfunc the register stage logs (``pipeline/serving_model.py`` with ``minibert`` beside
it, the same model_config), serves it with ``--workers`` uvicorn workers, and sends requests of ``--batch`` texts
(transfer-set sentences, each request different) from ``--clients`` threads until ``--seconds`` pass or
``--max-requests`` are answered, whichever comes first. Records requests/s, texts/s, p50 / p99 request latency,
errors, the server's resident memory (its process and children) after it answers its first request and at
the end, and the inference path each worker serves on (``served_on``, from the line a loaded model logs).

    python benchmarks/serving_load.py --root <run> [--clients 16] [--seconds 60] [--workers 1] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
from machine import describe

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss_mb(pid: int) -> float:
    """Resident MB of ``pid`` and every descendant (uvicorn's workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            rss = next(line for line in Path(f"/proc/{p}/status").read_text().splitlines() if line.startswith("VmRSS"))
            total += int(rss.split()[1])
        except (OSError, StopIteration):
            pass
        todo += children.get(p, [])
    return total / 1024


def save_model(root: Path, folder: Path, threads: int) -> Path:
    import mlflow

    from minibert.contract import read_onnx_contract
    from pipeline.packaging import SERVING_CODE, SERVING_LIBRARY, pip_requirements, serving_config

    onnx = root / "models/quantize/student_int8.onnx"
    out = folder / "model"
    mlflow.pyfunc.save_model(str(out), python_model=str(SERVING_CODE), code_paths=[str(SERVING_LIBRARY)],
                             artifacts={"onnx": str(onnx), "tokenizer": str(root / "models/tokenizer/tokenizer.json")},
                             pip_requirements=pip_requirements(),
                             model_config=serving_config(read_onnx_contract(onnx), threads))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=8, help="texts a request")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="the engine's threads (model_config threads)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serving_load.json")
    args = parser.parse_args()
    from pipeline.serving_model import SERVING_LINE

    texts = pd.read_parquet(args.root / "data/transfer/texts.parquet")["text"].drop_duplicates().sample(
        n=20_000, random_state=0).tolist()
    folder = Path(tempfile.mkdtemp(prefix="serving_load."))
    model = save_model(args.root, folder, args.threads)
    port = free_port()
    # uvicorn is the venv's: put its bin first, as an activated venv would
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", str(model), "--env-manager", "local",
                               "-h", "127.0.0.1", "-p", str(port), "-w", str(args.workers)],
                              env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"),  # noqa: SIM115
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}/invocations"

    def ask(batch: list[str]) -> list[dict]:
        body = json.dumps({"dataframe_split": {"columns": ["text"], "data": [[t] for t in batch]}}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["predictions"]

    try:
        deadline = time.time() + 180
        while True:
            if server.poll() is not None:
                raise SystemExit(f"server exited: {(folder / 'server.log').read_text()[-2000:]}")
            try:
                ask(texts[:1])
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("the server did not answer in 180 s") from None
                time.sleep(0.5)
        rss_start = tree_rss_mb(server.pid)
        latencies: list[float] = []
        errors: list[str] = []
        counter = iter(range(args.max_requests))
        lock = threading.Lock()
        stop = time.perf_counter() + args.seconds

        def client() -> None:
            while time.perf_counter() < stop:
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
                start = (n * args.batch) % (len(texts) - args.batch)
                batch = texts[start : start + args.batch]
                began = time.perf_counter()
                try:
                    answers = ask(batch)
                    if len(answers) != len(batch):
                        raise ValueError(f"{len(answers)} answers to {len(batch)} texts")
                except Exception as err:  # noqa: BLE001 - every failure counts as an error
                    with lock:
                        errors.append(f"{type(err).__name__}: {err}")
                    continue
                with lock:
                    latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - began
        rss_end = tree_rss_mb(server.pid)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    ms = 1000 * np.asarray(latencies)
    record = {"date": date.today().isoformat(), **describe(), "clients": args.clients, "seconds": round(elapsed, 1),
              "batch": args.batch, "workers": args.workers, "threads": args.threads, "requests": len(latencies),
              "errors": len(errors), "first_errors": errors[:3], "requests_per_s": len(latencies) / elapsed,
              "texts_per_s": len(latencies) * args.batch / elapsed, "p50_ms": float(np.percentile(ms, 50)),
              "p99_ms": float(np.percentile(ms, 99)), "rss_mb_start": rss_start, "rss_mb_end": rss_end,
              "model": str(args.root / "models/quantize/student_int8.onnx"),
              # the path each worker's model serves on, as its load line in the server's log names it
              "served_on": sorted({line[len(SERVING_LINE):].strip() for line in (folder / "server.log").read_text().splitlines()
                                   if line.startswith(SERVING_LINE)})}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
