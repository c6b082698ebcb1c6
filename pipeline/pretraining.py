"""Masked-language-model pretraining of the encoder on a corpus (the ``pretrain`` stage runs it; benchmarks too).

Documents are tokenized, cut into [CLS] piece [SEP] sequences of at most ``max_length``
tokens, batched by length with dynamic padding, and masked afresh each time a sequence is
seen (80/10/10). The MLM head runs in sparse mode: vocabulary logits only at masked
positions. With ``embedding_init: ppmi_svd`` the word embeddings (and so the tied decoder) start
from PPMI + SVD vectors counted over the whole corpus (``minibert.embedding_init``), which is
then encoded once for both; otherwise only as many documents are encoded as ``max_steps``
batches need. The decoder bias starts at the corpus's log unigram frequencies (``bias_init="zeros"``
only for the ablation that shows why), so the encoder never collapses onto the unigram plateau
(``minibert.embedding_init``).
A held-out slice of ``EVAL_ROWS`` sequences, masked once with a fixed seed, gives the masked-token accuracy, the
loss and the final states' spread reported at the end; a collapsed encoder gets a warning and
``collapsed: true`` in the metrics.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from minibert.batching import EpochStream, pad_batch, sorted_batches
from minibert.config import ModelConfig
from minibert.distributed import World
from minibert.embedding_init import ppmi_svd, set_token_embeddings, unigram_log_probs
from minibert.inference import chunk_document
from minibert.losses import mlm_loss
from minibert.masking import mask_tokens
from minibert.model import MaskedLM, build_mlm
from minibert.spread import token_deviation
from minibert.tokenizer import CLS, MASK, SEP, SPECIAL_TOKENS
from minibert.train_config import LoopConfig, PPMIConfig
from minibert.trainer import Checkpointer, Hooks, LoopResult, Tracker, fit
from pipeline.deadline import budget_s, record_trained
from pipeline.params import PretrainParams, TrainParams
from pipeline.progress import progress_bar
from pipeline.task import encode_documents

COLLAPSED_SPREAD = 0.01  # token_spread below this: the final states no longer tell tokens apart (fresh: ~0.7)
EVAL_ROWS = 512  # held-out sequences for masked-token accuracy (at most half the corpus's)


def build_sequences(
    tok: Tokenizer, texts: list[str], max_length: int, needed: int, seed: int, encoded: list[list[int]] | None = None,
) -> list[list[int]]:
    """Encode shuffled documents until ``needed`` sequences exist (or the corpus runs out).

    ``encoded``: every document's ids already (no specials), when the caller has them.
    """
    order = np.random.default_rng(seed).permutation(len(texts))
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    sequences: list[list[int]] = []
    for start in range(0, len(order), 2048):
        index = order[start : start + 2048]
        docs = ([encoded[i] for i in index] if encoded is not None
                else [e.ids for e in tok.encode_batch([texts[i] for i in index], add_special_tokens=False)])
        for ids in docs:
            sequences.extend(chunk_document(ids, max_length, cls_id, sep_id))
        if len(sequences) >= needed:
            break
    return sequences


def corpus_embeddings(encoded: Sequence[Sequence[int]], vocab_size: int, dim: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    """PPMI + SVD word vectors over every encoded corpus document, for every token id: (ids, vectors, metrics)."""
    start = time.perf_counter()
    docs = [np.asarray(ids, dtype=np.int64) for ids in encoded]
    ids, vectors = ppmi_svd(docs, vocab_size, dim, PPMIConfig(max_tokens=vocab_size), seed=seed)
    return ids, vectors, {"ppmi_seconds": time.perf_counter() - start, "ppmi_tokens": int(sum(len(d) for d in docs)),
                          "ppmi_vocab": len(ids)}


def masked_batch(seqs: list[list[int]], cfg: PretrainParams, vocab_size: int, gen: torch.Generator) -> tuple[Tensor, ...]:
    """(masked ids, attention mask, masked positions as int64 indices into the flattened B * T
    positions, labels at those positions). Indices, not a bool mask: made here on the CPU, they
    spare the GPU step a host sync (``MLMHead``)."""
    ids, mask = pad_batch(seqs, pad_id=0)
    maskable = ids >= len(SPECIAL_TOKENS)  # specials and padding are never masked
    masked, labels = mask_tokens(ids, maskable, SPECIAL_TOKENS.index(MASK), len(SPECIAL_TOKENS), vocab_size,
                                 cfg.mlm_probability, gen)
    flat = labels.flatten()
    positions = (flat != -100).nonzero().squeeze(1)
    return masked, mask, positions, flat[positions]


def batch_stream(sequences: list[list[int]], cfg: PretrainParams, vocab_size: int, seed: int,
                 world: World | None = None) -> EpochStream:
    """Endless length-bucketed, freshly masked batches; a new shuffle every epoch; resumable.
    Under torchrun, this rank's share of each batch, masked with a generator of its own."""
    world = world or World()
    return EpochStream(
        [len(s) for s in sequences], cfg.batch_size, seed,
        lambda index, gen: masked_batch([sequences[i] for i in index], cfg, vocab_size, gen),
        shard=(world.rank, world.size),
    )


def mlm_step(model: MaskedLM, batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
    ids, mask, positions, labels = batch
    return mlm_loss(model(ids, mask, masked_positions=positions), labels), mask.sum()  # a tensor: no host sync


def evaluate_mlm(model: MaskedLM, batches: list[tuple[Tensor, ...]]) -> dict[str, float]:
    """Masked-token accuracy, mean loss and the final states' spread (``minibert.spread``: 0 when
    the encoder has collapsed) over fixed, pre-masked batches."""
    correct, total, loss_sum, squared, cells = 0, 0, 0.0, 0.0, 0
    device = next(model.parameters()).device
    for batch in batches:
        ids, mask, positions, labels = (t.to(device) for t in batch)
        hidden, _ = model.backbone(ids, mask)
        logits = model.head(hidden, model.backbone.embeddings.tokens.weight, positions)
        loss_sum += float(mlm_loss(logits, labels)) * len(labels)
        correct += int((logits.argmax(-1) == labels).sum())
        total += len(labels)
        batch_squared, batch_cells = token_deviation(hidden.float(), mask)
        squared, cells = squared + batch_squared, cells + batch_cells
    return {"mlm_accuracy": correct / max(total, 1), "mlm_loss": loss_sum / max(total, 1),
            "token_spread": squared / max(cells, 1)}


def run(
    cfg: PretrainParams, shared: TrainParams, model_cfg: ModelConfig, tok: Tokenizer, texts: list[str], tracker: Tracker,
    checkpointer: Checkpointer | None = None, world: World | None = None, bias_init: str = "unigram",
) -> tuple[MaskedLM, dict]:
    """Pretrain; with a ``checkpointer``, a killed run resumes where its last checkpoint left off.
    Under torchrun (``world``) each rank trains on its share of every batch of ``cfg.batch_size``.
    ``bias_init``: unigram (the decoder bias at log unigram frequencies) | zeros (the ablation: it collapses)."""
    world = world or World()
    world.check_batch(cfg.batch_size, "pretrain.batch_size")
    torch.manual_seed(shared.seed)
    if cfg.max_length > model_cfg.max_positions:
        raise ValueError(f"pretrain.max_length {cfg.max_length} exceeds model max_positions {model_cfg.max_positions}")
    needed = cfg.max_steps * cfg.batch_size + EVAL_ROWS
    counted = cfg.embedding_init == "ppmi_svd" or bias_init == "unigram"
    encoded = encode_documents(tok, texts) if counted else None  # all of it, once
    sequences = build_sequences(tok, texts, cfg.max_length, needed, shared.seed, encoded)
    eval_rows = min(EVAL_ROWS, len(sequences) // 2)
    if eval_rows < 1:
        raise ValueError(f"corpus gives {len(sequences)} sequences; pretraining needs at least 2 (one held out)")
    held_out, train = sequences[:eval_rows], sequences[eval_rows:]
    eval_gen = torch.Generator().manual_seed(shared.seed + 1)
    eval_batches = [masked_batch([held_out[i] for i in idx], cfg, model_cfg.vocab_size, eval_gen)
                    for idx in sorted_batches([len(s) for s in held_out], cfg.batch_size)]
    model = build_mlm(model_cfg)
    init_metrics: dict = {}
    docs = [np.asarray(ids, dtype=np.int64) for ids in encoded] if encoded is not None else []  # converted once, for both
    if cfg.embedding_init == "ppmi_svd":
        ids, vectors, init_metrics = corpus_embeddings(docs, tok.get_vocab_size(), model_cfg.hidden_size, shared.seed)
        set_token_embeddings(model.backbone.embeddings.tokens, ids, vectors)
    if bias_init == "unigram":  # the decoder starts at the unigram solution: nothing to gain by collapsing
        with torch.no_grad():
            model.head.bias.copy_(unigram_log_probs(docs, model_cfg.vocab_size))
    model.to(world.device())  # this rank's GPU when there is one, else the CPU
    trained = torch.compile(model, dynamic=True) if cfg.compile else model  # shares parameters with ``model``
    budget, budget_metrics = budget_s("pretrain", cfg.time_budget_min)  # shrunk when the pipeline runs behind
    if cfg.max_steps == 0:  # no MLM steps: the encoder is its initialisation (count-based vectors, if asked for)
        model.eval()
        with torch.no_grad():
            first = evaluate_mlm(model, eval_batches)
        tracker.log_metrics({f"eval_{k}": v for k, v in first.items()}, step=0)
        result = LoopResult(steps=0, seconds=0.0, last_loss=float("nan"), stopped_by="max_steps", evals=[(0, first)])
    else:
        with progress_bar(cfg.max_steps, "pretrain") as bar:
            result = fit(
                trained, batch_stream(train, cfg, model_cfg.vocab_size, shared.seed, world), mlm_step,
                shared.optim(cfg.lr, cfg.warmup_ratio),
                LoopConfig(max_steps=cfg.max_steps, time_budget_s=budget, log_every=shared.log_every,
                           eval_every=cfg.eval_every, precision=shared.precision, checkpoint_every=cfg.checkpoint_every),
                tracker, Hooks(evaluate=lambda m: evaluate_mlm(m, eval_batches), progress=bar,
                               evaluate_tokens=sum(int(b[1].sum()) for b in eval_batches)),
                checkpointer, world,
            )
    if world.main and result.steps:
        record_trained("pretrain", result.seconds - result.seconds_before_resume)  # this run's, not the killed one's
    final = result.evals[-1][1]
    collapsed = final["token_spread"] < COLLAPSED_SPREAD
    if collapsed:
        warnings.warn(f"pretrain: the encoder collapsed (token_spread {final['token_spread']:.2g} < {COLLAPSED_SPREAD}): every "
                      "token gets about the same final state, and fine-tuning from it starts at chance. Lower "
                      "pretrain.lr", stacklevel=2)
    examples = result.steps * cfg.batch_size
    tokens_seen = examples * float(np.mean([len(s) for s in train]))
    metrics = {
        **final,
        "mlm_perplexity": math.exp(min(final["mlm_loss"], 50.0)),
        "steps": result.steps,
        "stopped_by_budget": result.stopped_by == "time_budget",
        "train_seconds": result.seconds,
        "train_sequences": len(train),
        "resumed_from_step": result.resumed_from,
        "bf16_autocast": result.precision == "bf16",  # precision auto: what this machine got
        "epochs": examples / len(train),
        "approx_tokens_seen": tokens_seen,
        "processes": world.size,
        "collapsed": collapsed,
        **budget_metrics,
        **init_metrics,
    }
    if result.steps:  # no training loss without a step (and no NaN in the metrics JSON)
        metrics["final_train_loss"] = result.last_loss
    return model.cpu().eval(), metrics
