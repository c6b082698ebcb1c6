"""The deployable sentiment model as an MLflow pyfunc (models-from-code).

MLflow copies this file into the logged model, so it imports only what the serving
environment installs (numpy, pandas, tokenizers, onnxruntime): no minibert, no torch.
Input: a DataFrame with a ``text`` column (or a list of strings). Output: a DataFrame with
``label`` (0 negative, 1 positive) and ``probability`` (of the predicted label) per row.
Artifacts: ``tokenizer`` (tokenizer.json) and ``onnx`` (the exported classifier);
model_config: ``max_length``, ``threads``.
"""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel


class SentimentModel(PythonModel):
    def load_context(self, context):  # noqa: ANN001 - untyped: MLflow reads predict's hints as a schema
        import onnxruntime as ort
        from tokenizers import Tokenizer

        config = context.model_config or {}
        self.tokenizer = Tokenizer.from_file(context.artifacts["tokenizer"])
        self.tokenizer.enable_truncation(max_length=int(config.get("max_length", 64)))
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(config.get("threads", 0))
        self.session = ort.InferenceSession(context.artifacts["onnx"], options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}

    def predict(self, context, model_input, params=None):  # noqa: ANN001 - see load_context
        if isinstance(model_input, pd.DataFrame):
            if "text" not in model_input.columns:
                raise ValueError(f"input needs a 'text' column; got columns {list(model_input.columns)}")
            texts = model_input["text"].astype(str).tolist()
        else:
            texts = [str(t) for t in model_input]
        if not texts:
            return pd.DataFrame({"label": pd.Series([], dtype="int64"), "probability": pd.Series([], dtype="float64")})
        encodings = self.tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        logits = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = shifted / shifted.sum(axis=1, keepdims=True)
        labels = probs.argmax(axis=1)
        return pd.DataFrame({"label": labels.astype("int64"), "probability": probs.max(axis=1).astype("float64")})


mlflow.models.set_model(SentimentModel())
