"""The deployable text classifier as an MLflow pyfunc (models-from-code).

MLflow copies this file into the logged model, and the ``minibert`` package beside it (``code_paths``): it
serves through ``minibert.runtime``, which is torch-free, so the serving environment installs only what that
imports (numpy, tokenizers, onnxruntime, openvino) and pandas. For the same reason it is the one module besides
``pipeline.tracking`` that imports mlflow (for ``PythonModel``): it cannot import the project's pipeline where
it is served. It reads texts of any length as the evaluate stage does, through the windows the ONNX graph
records (``minibert.contract``; ``model_config``'s for a graph without them), on the fastest inference path the
serving host has that the graph's parity record lists or that passes its check there (``minibert.runtime``;
``model_config``'s ``runtime`` and ``precision`` override the choice).
Input: a DataFrame with a ``text`` column (or a list of strings), and optionally the inference
param ``min_confidence`` (0 to 1; default 0). Output: a DataFrame with ``label`` (the class name the
graph's contract records, or ``abstain`` where the top probability is below ``min_confidence``),
``probability`` (the top class's) and one ``p_<class>`` column a class (every class's probability) per
row. The probabilities are calibrated: the logits are divided by the temperature the graph records.
Artifacts: ``tokenizer`` (tokenizer.json), ``onnx`` (the exported classifier). At load it writes one line to stderr
naming the inference path it serves on (``SERVING_LINE``), so a server's log says which one ``auto`` took.
model_config: ``max_length``, ``stride``, ``aggregate``, ``threads``, ``runtime``, ``precision``.
"""

from __future__ import annotations

import sys

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel

SERVING_LINE = "minibert: serving on"  # the start of the line a loaded model writes to stderr, naming its path
ABSTAIN = "abstain"  # the label answered where the top probability is below params.min_confidence
WINDOW_KEYS = ("max_length", "stride", "aggregate")


class TextClassifierModel(PythonModel):
    def load_context(self, context):  # noqa: ANN001 - untyped: MLflow reads predict's hints as a schema
        from minibert.runtime import RuntimeConfig, TextClassifier
        from minibert.validation import ConfigError

        config = context.model_config or {}
        settings = {"threads": int(config.get("threads", 0)), "runtime": str(config.get("runtime", "auto")),
                    "precision": str(config.get("precision", "auto"))}
        artifacts = context.artifacts["tokenizer"], context.artifacts["onnx"]
        try:  # the windows the graph records
            self.classifier = TextClassifier.from_files(*artifacts, RuntimeConfig(**settings))
        except ConfigError:  # a graph without a contract: model_config's windows
            windows = {key: config[key] for key in WINDOW_KEYS if key in config}
            self.classifier = TextClassifier.from_files(*artifacts, RuntimeConfig(**settings, **windows))
        self.labels = self.classifier.labels
        # which path this host serves on (``auto`` picks it here, at load): one line a worker, in the server's log
        print(f"{SERVING_LINE} {self.classifier.path} (runtime {settings['runtime']}, precision {settings['precision']}, "
              f"threads {settings['threads']})", file=sys.stderr, flush=True)

    def logits(self, texts: list[str]) -> np.ndarray:
        """(N, L) logits, one row a text, through sliding windows."""
        return self.classifier.logits(texts)

    def predict(self, context, model_input, params=None):  # noqa: ANN001 - see load_context
        threshold = float((params or {}).get("min_confidence", 0.0))
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"params.min_confidence: {threshold} must be in [0, 1] (0 = always answer a class)")
        if isinstance(model_input, pd.DataFrame):
            if "text" not in model_input.columns:
                raise ValueError(f"input needs a 'text' column; got columns {list(model_input.columns)}")
            texts = model_input["text"].astype(str).tolist()
        else:
            texts = [str(t) for t in model_input]
        classes = self.labels
        if not texts:
            return pd.DataFrame({"label": pd.Series([], dtype=str), "probability": pd.Series([], dtype="float64"),
                                 **{f"p_{c}": pd.Series([], dtype="float64") for c in classes}})
        probs = self.classifier.predict(texts).probabilities.astype("float64")
        top = probs.max(axis=1)
        return pd.DataFrame({"label": [classes[i] if p >= threshold else ABSTAIN for i, p in zip(probs.argmax(axis=1), top)],
                             "probability": top, **{f"p_{c}": probs[:, i] for i, c in enumerate(classes)}})


mlflow.models.set_model(TextClassifierModel())
