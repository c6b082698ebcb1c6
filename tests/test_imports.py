"""The library stays a library: importing it loads none of the workflow stack."""

import json
import subprocess
import sys

FORBIDDEN = ("pipeline", "mlflow", "prefect", "dvc", "transformers", "onnx", "onnxruntime", "datasets")


def test_import_minibert_loads_no_workflow_or_optional_packages() -> None:
    code = (
        "import sys, json, minibert, minibert.tokenizer, minibert.hf_interop\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == [], f"import minibert pulled in {loaded}"
    assert "torch" in subprocess.run(
        [sys.executable, "-c", "import sys, minibert; print(sorted(sys.modules))"], capture_output=True, text=True, check=True
    ).stdout
