"""ONNX Runtime's fused transformer kernels for a minibert graph: fused attention at export, then
ORT's transformer optimiser for the rest.

References: ONNX Runtime's ``com.microsoft.Attention`` contrib operator and its transformer
optimiser (``onnxruntime.transformers.optimizer.optimize_model``), which fuses BERT graphs
exported from Hugging Face models by pattern matching. Departures:

1. The optimiser's attention patterns are Hugging Face's (three projections, an additive
   ``(1 - mask) * -10000`` bias); minibert's fused QKV projection and boolean mask do not match
   them, so attention is emitted fused at export instead: inside ``fused_attention(model)`` each
   ``SelfAttention`` calls ``_OrtAttention``, which computes the same maths in torch and exports
   as one ``Attention`` node (Q, K and V weights concatenated column-wise, as both layouts
   already are; the (B, T) mask as int32). The optimiser then fuses what it does match:
   residual + LayerNorm into ``SkipLayerNormalization``, bias + erf GELU into ``BiasGelu``.
2. Such a graph runs only in ONNX Runtime (contrib operators); the portable standard-operator
   export stays ``minibert.export.export_onnx``'s default. Rotary positions act on q and k
   between projection and attention, which the fused kernel cannot express: refused.

Shape legend: B batch, T sequence length, C hidden size, H heads.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minibert.attention import SelfAttention, sdpa_attention
from minibert.engines import import_onnxruntime
from minibert.files import atomic_output
from minibert.onnx_deps import import_onnx

ONNX_INT32 = 6  # onnx.TensorProto.INT32, without importing onnx here


class _OrtAttention(torch.autograd.Function):
    """Fused-QKV self-attention before the output projection; exports as ``com.microsoft.Attention``."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, mask: Tensor, num_heads: int) -> Tensor:  # noqa: ANN001
        """x (B, T, C), weight (3C, C), bias (3C,), mask bool (B, 1, 1, T) -> (B, T, C)."""
        b, t, c = x.shape
        qkv = F.linear(x, weight, bias).view(b, t, 3, num_heads, c // num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, T, D)
        y, _ = sdpa_attention(q, k, v, mask, 0.0, (c // num_heads) ** -0.5)
        return y.transpose(1, 2).reshape(b, t, c)

    @staticmethod
    def symbolic(g, x, weight, bias, mask, num_heads):  # noqa: ANN001, ANN205 - TorchScript graph values
        weight_t = g.op("Transpose", weight, perm_i=[1, 0])  # (C, 3C): Q | K | V columns
        mask_2d = g.op("Squeeze", g.op("Cast", mask, to_i=ONNX_INT32), g.op("Constant", value_t=torch.tensor([1, 2])))
        out = g.op("com.microsoft::Attention", x, weight_t, bias, mask_2d, num_heads_i=num_heads)
        out.setType(x.type())  # (B, T, C) like the input: the exporter cannot infer a contrib op's type
        return out


def _fused_forward(self: SelfAttention, x: Tensor, mask: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, None]:
    if need_weights or self.training:
        raise RuntimeError("fused attention is for inference export: no attention weights, no dropout (call .eval())")
    if mask is None:
        mask = torch.ones(x.shape[0], 1, 1, x.shape[1], dtype=torch.bool, device=x.device)
    return self.out(_OrtAttention.apply(x, self.qkv.weight, self.qkv.bias, mask, self.num_heads)), None


@contextmanager
def fused_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block every ``SelfAttention`` of ``model`` runs (and exports) as one fused node.

    Inference only (eval mode, no weights returned). Each module's own ``forward`` attribute,
    if it had one, is put back exactly on exit, so blocks nest.
    """
    modules = [m for m in model.modules() if isinstance(m, SelfAttention)]
    if any(m.rotary is not None for m in modules):
        raise ValueError("fused attention cannot apply rotary positions; export this model without fusion")
    previous = [m.__dict__.get("forward") for m in modules]
    for module in modules:
        module.forward = types.MethodType(_fused_forward, module)  # instance attribute shadows the class method
    try:
        yield model
    finally:
        for module, before in zip(modules, previous):
            if before is None:
                del module.forward
            else:
                module.forward = before


def optimize_for_ort(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], num_heads: int, hidden_size: int
) -> dict[str, int]:
    """Run ORT's BERT optimiser over ``src`` into ``dst``; returns the count of each fused operator.

    opt_level 0: only the optimiser's own fusions are written, so the file stays portable across
    ORT builds; the session applies its hardware-specific graph optimisations when it loads.
    """
    import_onnxruntime()
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, opt_level=0)
    with atomic_output(dst) as tmp:
        model.save_model_to_file(str(tmp))
    return {name: count for name, count in model.get_fused_operator_statistics().items() if count}


def fused_operator_counts(path: str | os.PathLike[str]) -> dict[str, int]:
    """How many nodes of each operator type the ONNX file at ``path`` holds."""
    graph = import_onnx().load(str(path), load_external_data=False).graph
    counts: dict[str, int] = {}
    for node in graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts

