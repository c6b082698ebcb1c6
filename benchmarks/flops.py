"""Model FLOPs of MLM training, and model FLOPs utilisation (MFU): pure functions of the config.

Counts matrix-multiply FLOPs only (2 per multiply-add), as PaLM's MFU does (Chowdhery et al.
2022, appendix B): training costs 3 forward passes' worth (the backward pass computes the
gradients of both the activations and the weights, 2x the forward), so per token

    train = 3 * forward
    forward = L * (8 d^2 + 4 d I + 4 T d) + p * (2 d^2 + 2 d V)
            = 2 N_enc + 4 L T d + 2 p N_head      where N_enc = L (4 d^2 + 2 d I), N_head = d^2 + d V

i.e. the familiar 6 N + 12 L T d, with the MLM head paid only at the masked fraction p of tokens
(the sparse head decodes masked positions only). Per layer: fused QKV 6 d^2, output projection
2 d^2, feed-forward 4 d I, attention scores q k^T 2 T d and weighted values 2 T d (T = the
sequence length a token attends over). Not counted: embedding lookups, LayerNorm, softmax,
GELU, dropout, biases, the optimiser, and padding (throughput is counted in real tokens, so
padded positions are work the model does but MFU does not credit). On BERT-Small with eager
attention the count equals ``torch.utils.flop_counter.FlopCounterMode``'s over a forward and
backward (the counter misses the CPU SDPA kernel, so it needs the eager core to see attention).

Shape legend: L layers, d hidden size, I feed-forward size, V vocabulary, T sequence length.
"""

from __future__ import annotations

from minibert.config import ModelConfig

H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H200 SXM datasheet, dense bf16 tensor core peak
H200_MEASURED_MATMUL_TFLOPS = 790.0  # a large bf16 matmul measured on the machine the GPU profile runs on


def encoder_forward_flops(cfg: ModelConfig, seq_len: float) -> float:
    """Forward matmul FLOPs per token of the encoder stack at sequence length ``seq_len``."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    projections = 2 * (4 * d * d + 2 * d * i)  # QKV (3 d^2) + output (d^2) + feed-forward up and down (2 d I)
    attention = 4 * seq_len * d  # q k^T and probs @ v, over all heads
    return cfg.num_layers * (projections + attention)


def mlm_head_forward_flops(cfg: ModelConfig, masked_fraction: float) -> float:
    """Forward matmul FLOPs per token of the sparse MLM head: transform (d^2) and tied decoder (d V),
    paid at the ``masked_fraction`` of tokens that carry a loss."""
    d = cfg.hidden_size
    return masked_fraction * 2 * (d * d + d * cfg.vocab_size)


def mlm_train_flops_per_token(cfg: ModelConfig, seq_len: float, mlm_probability: float) -> float:
    """Training (forward + backward) model FLOPs per real token of MLM pretraining.

    ``seq_len``: mean training sequence length, [CLS] and [SEP] included (with length-bucketed
    batches a token attends over about that many positions). The two specials are never masked,
    so the masked fraction of tokens is ``mlm_probability * (seq_len - 2) / seq_len``.
    """
    if seq_len <= 2 or not 0.0 < mlm_probability < 1.0:
        raise ValueError(f"need seq_len > 2 and 0 < mlm_probability < 1, got {seq_len}, {mlm_probability}")
    masked_fraction = mlm_probability * (seq_len - 2) / seq_len
    return 3 * (encoder_forward_flops(cfg, seq_len) + mlm_head_forward_flops(cfg, masked_fraction))


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak (a fraction, not percent)."""
    if peak_tflops <= 0:
        raise ValueError(f"peak_tflops must be > 0, got {peak_tflops}")
    return tokens_per_s * flops_per_token / (peak_tflops * 1e12)
