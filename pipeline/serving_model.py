"""The deployable text classifier as an MLflow pyfunc (models-from-code).

MLflow copies this file into the logged model, so it imports only what the serving
environment installs (numpy, pandas, tokenizers, onnxruntime): no minibert, no torch. For the
same reason it is the one module besides ``pipeline.tracking`` that imports mlflow (for
``PythonModel``): it cannot import the project's tracking module where it is served. It reads
texts of any length as the evaluate stage does: sliding windows of ``max_length`` tokens every
``stride`` tokens (the rule of ``minibert.windows.sliding_windows``; tests/test_serving.py
checks the two agree), window logits combined by ``aggregate`` (mean, max or first): the windows the
ONNX graph records in its metadata (``minibert.contract``), else ``model_config``'s.
Input: a DataFrame with a ``text`` column (or a list of strings), and optionally the inference
param ``min_confidence`` (0 to 1; default 0). Output: a DataFrame with ``label`` (the class name the
graph's contract records, or ``abstain`` where the top probability is below ``min_confidence``),
``probability`` (the top class's) and one ``p_<class>`` column a class (every class's probability) per
row. The probabilities are calibrated: the logits are divided by the temperature the graph records.
Artifacts: ``tokenizer`` (tokenizer.json), ``onnx`` (the exported classifier).
model_config: ``max_length``, ``stride``, ``aggregate``, ``threads``.
"""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel

ABSTAIN = "abstain"  # the label answered where the top probability is below params.min_confidence
AGGREGATE = {"mean": lambda w: w.mean(axis=0), "max": lambda w: w.max(axis=0), "first": lambda w: w[0]}


def windows(ids: list[int], max_length: int, stride: int, cls_id: int, sep_id: int) -> list[list[int]]:
    body = max_length - 2
    if len(ids) <= body:
        return [[cls_id, *ids, sep_id]]
    starts = list(range(0, len(ids) - body, stride)) + [len(ids) - body]
    return [[cls_id, *ids[s : s + body], sep_id] for s in starts]


def encodable(text: str) -> str:
    """Lone UTF-16 surrogates (JSON allows them; tokenizers refuses them) -> U+FFFD. The same rule
    as ``minibert.tokenizer.encodable``; repeated here because the serving environment has no minibert."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class TextClassifierModel(PythonModel):
    def load_context(self, context):  # noqa: ANN001 - untyped: MLflow reads predict's hints as a schema
        import onnxruntime as ort
        from tokenizers import Tokenizer

        config = context.model_config or {}
        self.tokenizer = Tokenizer.from_file(context.artifacts["tokenizer"])
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.cls_id, self.sep_id = self.tokenizer.token_to_id("[CLS]"), self.tokenizer.token_to_id("[SEP]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(config.get("threads", 0))
        self.session = ort.InferenceSession(context.artifacts["onnx"], options, providers=["CPUExecutionProvider"])
        # the windows the graph records (minibert.contract), else model_config's
        stamp = self.session.get_modelmeta().custom_metadata_map.get("minibert")
        contract = json.loads(stamp) if stamp else {}
        reads = {**config, **json.loads(contract["windows"])} if "windows" in contract else config
        self.labels = json.loads(contract["labels"]) if "labels" in contract else None
        self.temperature = float(contract.get("temperature", 1.0))  # calibrated on validation (minibert.calibration)
        self.max_length = int(reads.get("max_length", 64))
        self.stride = int(reads.get("stride", self.max_length - 2))
        self.aggregate = AGGREGATE[reads.get("aggregate", "mean")]
        self.inputs = {i.name for i in self.session.get_inputs()}

    def logits(self, texts: list[str]) -> np.ndarray:
        """(N, L) logits, one row a text, through sliding windows."""
        owner, rows = [], []
        for doc, enc in enumerate(self.tokenizer.encode_batch([encodable(t) for t in texts], add_special_tokens=False)):
            for window in windows(enc.ids, self.max_length, self.stride, self.cls_id, self.sep_id):
                owner.append(doc)
                rows.append(window)
        order = np.argsort([len(r) for r in rows], kind="stable")
        window_logits = np.empty((len(rows), 0), dtype=np.float32)
        for start in range(0, len(rows), 64):  # length-sorted batches of 64 windows
            index = order[start : start + 64]
            width = max(len(rows[i]) for i in index)
            ids = np.zeros((len(index), width), dtype=np.int64)
            mask = np.zeros((len(index), width), dtype=np.int64)
            for r, i in enumerate(index):
                ids[r, : len(rows[i])] = rows[i]
                mask[r, : len(rows[i])] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            out = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
            if window_logits.shape[1] == 0:
                window_logits = np.empty((len(rows), out.shape[1]), dtype=np.float32)
            window_logits[index] = out
        owner_arr = np.asarray(owner)
        return np.stack([self.aggregate(window_logits[owner_arr == d]) for d in range(len(texts))])

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
        classes = self.labels or [str(i) for i in range(self.session.get_outputs()[0].shape[-1])]
        if not texts:
            return pd.DataFrame({"label": pd.Series([], dtype=str), "probability": pd.Series([], dtype="float64"),
                                 **{f"p_{c}": pd.Series([], dtype="float64") for c in classes}})
        logits = self.logits(texts) / self.temperature
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = (shifted / shifted.sum(axis=1, keepdims=True)).astype("float64")
        top = probs.max(axis=1)
        return pd.DataFrame({"label": [classes[i] if p >= threshold else ABSTAIN for i, p in zip(probs.argmax(axis=1), top)],
                             "probability": top, **{f"p_{c}": probs[:, i] for i, c in enumerate(classes)}})


mlflow.models.set_model(TextClassifierModel())
