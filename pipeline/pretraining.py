"""Masked-language-model pretraining of the encoder on a corpus (the ``pretrain`` stage runs it; benchmarks too).

Documents are tokenized once. A fixed slice of them is held out for the measurement (below); the rest train.
With ``packing`` (the default) the training documents, shuffled, run on as one stream with [SEP] between
them, cut into rows of exactly ``max_length`` tokens that start with [CLS]: every step has the same shape,
no padding and no attention mask (RoBERTa's full-sentences input, Cramming's packing), so the fused
attention kernels run. Without it (the old path), each document is cut into [CLS] piece [SEP] sequences,
batched by length with dynamic padding. Either way a row is masked afresh each time it is seen
(80/10/10), and the MLM head runs in sparse mode: vocabulary logits only at masked positions.
``dropout`` and ``attention`` replace the model's dropout and attention core while pretraining (Cramming
pretrains without dropout: it slows the step and a run this short does not overfit; on a CPU the eager core's
backward beats SDPA's flash kernel at these sizes, ``benchmarks/mlm_ceiling.py``); the checkpoint keeps the
model section's for fine-tuning.
With ``embedding_init: ppmi_svd`` the word embeddings (and so the tied decoder) start from PPMI + SVD
vectors counted over the training documents (``minibert.embedding_init``). The decoder bias starts at
their log unigram frequencies (``bias_init="zeros"`` only for the ablation that shows why), so the
encoder never collapses onto the unigram plateau.

**The measurement is fixed** whatever the training section says: ``EVAL_ROWS`` [CLS] piece [SEP]
sequences of at most ``EVAL_LENGTH`` tokens cut from documents drawn in an order fixed by ``EVAL_SEED``
(never trained on), masked once at ``EVAL_PROBABILITY`` (80/10/10) with that seed. Its masked-token
accuracy and loss compare across runs over the same corpus and tokenizer, whatever their sequence length,
masking rate, packing or seed; the final states' spread flags a collapsed encoder (``collapsed: true`` and a
warning).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from torch import Tensor

from minibert.batching import EpochStream, pad_batch, sorted_batches
from minibert.config import ModelConfig
from minibert.distributed import World
from minibert.embedding_init import ppmi_svd, set_token_embeddings, unigram_log_probs
from minibert.losses import mlm_loss
from minibert.masking import mask_tokens
from minibert.model import MaskedLM, build_mlm
from minibert.spread import token_deviation
from minibert.tokenizer import CLS, MASK, SEP, SPECIAL_TOKENS
from minibert.train_config import LoopConfig, PPMIConfig
from minibert.trainer import Checkpointer, Hooks, LoopResult, Tracker, fit
from minibert.windows import chunk_document
from pipeline.deadline import budget_s, record_trained
from pipeline.params import PretrainParams, TrainParams
from pipeline.progress import progress_bar
from pipeline.task import encode_documents

COLLAPSED_SPREAD = 0.01  # token_spread below this: the final states no longer tell tokens apart (fresh: ~0.7)
# the held-out measurement's protocol (the module docstring): fixed, so that no training choice moves it
EVAL_ROWS = 512  # held-out sequences (from at most a tenth of the corpus's documents)
EVAL_SHARE = 0.1  # of the corpus's documents, the most the measurement holds out
EVAL_LENGTH = 128  # tokens a held-out sequence at most, [CLS] and [SEP] included (capped at the model's positions)
EVAL_PROBABILITY = 0.15  # share of a held-out sequence's tokens masked (BERT's)
EVAL_SEED = 20261206  # draws the held-out documents and their masks; not train.seed
EVAL_BATCH = 64  # sequences a held-out batch (no effect on the numbers)


def split_held_out(encoded: Sequence[Sequence[int]], length: int, cls_id: int, sep_id: int) -> tuple[list[list[int]], np.ndarray]:
    """(the held-out sequences, the training documents' indices in corpus order). Documents are drawn in an order
    fixed by ``EVAL_SEED`` until their [CLS] piece [SEP] chunks of ``length`` give ``EVAL_ROWS`` sequences, from at
    most ``EVAL_SHARE`` of the documents (at least one); a drawn document is held out whole, chunks beyond
    ``EVAL_ROWS`` included."""
    order = np.random.default_rng(EVAL_SEED).permutation(len(encoded))
    held: list[list[int]] = []
    taken = 0
    for index in order[: max(1, int(EVAL_SHARE * len(encoded)))]:
        if len(held) >= EVAL_ROWS:
            break
        held.extend(chunk_document(encoded[index], length, cls_id, sep_id))
        taken += 1
    if not held or taken == len(encoded):
        raise ValueError(f"the corpus has {len(encoded)} document(s) with text; pretraining needs at least 2 "
                         "(one is held out for the measurement)")
    return held[:EVAL_ROWS], np.sort(order[taken:])


def build_sequences(
    encoded: Sequence[Sequence[int]], max_length: int, needed: int, seed: int, cls_id: int, sep_id: int,
) -> list[list[int]]:
    """[CLS] piece [SEP] sequences of at most ``max_length`` from the documents (ids without specials) in an order
    drawn from ``seed``, until ``needed`` exist (or the corpus runs out): the unpacked path's rows."""
    order = np.random.default_rng(seed).permutation(len(encoded))
    sequences: list[list[int]] = []
    for start in range(0, len(order), 2048):  # checked a block of documents at a time, as the rows always were
        for i in order[start : start + 2048]:
            sequences.extend(chunk_document(encoded[i], max_length, cls_id, sep_id))
        if len(sequences) >= needed:
            break
    return sequences


def pack_rows(encoded: Sequence[Sequence[int]], max_length: int, seed: int, cls_id: int, sep_id: int) -> np.ndarray:
    """The packed path's rows, (N, max_length) int32: the documents in an order drawn from ``seed``, each followed
    by [SEP], run on as one stream cut into rows of [CLS] + ``max_length`` - 1 tokens; a row may end inside a
    document and the next row goes on with it. The stream's tail shorter than a row is dropped."""
    if max_length < 2:
        raise ValueError(f"pretrain.max_length: {max_length} leaves no room after [CLS]; expected >= 2")
    order = np.random.default_rng(seed).permutation(len(encoded))
    pieces = [np.asarray(encoded[i], dtype=np.int32) for i in order if len(encoded[i])]
    separator = np.asarray([sep_id], dtype=np.int32)
    stream = np.concatenate([part for piece in pieces for part in (piece, separator)]) if pieces else separator[:0]
    body = max_length - 1
    rows = len(stream) // body
    if rows == 0:
        raise ValueError(f"the training documents give {len(stream)} tokens: fewer than one packed row of "
                         f"{max_length}; lower pretrain.max_length or set pretrain.packing: false")
    cls = np.full((rows, 1), cls_id, dtype=np.int32)
    return np.concatenate([cls, stream[: rows * body].reshape(rows, body)], axis=1)


def corpus_embeddings(encoded: Sequence[Sequence[int]], vocab_size: int, dim: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    """PPMI + SVD word vectors over every encoded document given, for every token id: (ids, vectors, metrics)."""
    start = time.perf_counter()
    docs = [np.asarray(ids, dtype=np.int64) for ids in encoded]
    ids, vectors = ppmi_svd(docs, vocab_size, dim, PPMIConfig(max_tokens=vocab_size), seed=seed)
    return ids, vectors, {"ppmi_seconds": time.perf_counter() - start, "ppmi_tokens": int(sum(len(d) for d in docs)),
                          "ppmi_vocab": len(ids)}


def masked_rows(ids: Tensor, mask: Tensor, probability: float, vocab_size: int, gen: torch.Generator) -> tuple[Tensor, ...]:
    """(masked ids, attention mask, masked positions as int64 indices into the flattened B * T positions, labels at
    those positions) of ids (B, T) and their mask. Indices, not a bool mask: made here on the CPU, they spare the GPU
    step a host sync (``MLMHead``)."""
    maskable = ids >= len(SPECIAL_TOKENS)  # specials and padding are never masked
    masked, labels = mask_tokens(ids, maskable, SPECIAL_TOKENS.index(MASK), len(SPECIAL_TOKENS), vocab_size,
                                 probability, gen)
    flat = labels.flatten()
    positions = (flat != -100).nonzero().squeeze(1)
    return masked, mask, positions, flat[positions]


def masked_batch(seqs: list[list[int]], probability: float, vocab_size: int, gen: torch.Generator) -> tuple[Tensor, ...]:
    """``masked_rows`` of sequences padded to the longest."""
    return masked_rows(*pad_batch(seqs, pad_id=0), probability, vocab_size, gen)


def training_rows(encoded: Sequence[Sequence[int]], cfg: PretrainParams, seed: int, cls_id: int, sep_id: int,
                  needed: int | None = None) -> list[list[int]] | np.ndarray:
    """The rows ``cfg`` trains on: packed rows (``pack_rows``) or, with ``packing: false``, document pieces for
    ``needed`` sequences (default: ``max_steps`` x ``batch_size``). ``batch_stream`` takes either."""
    if cfg.packing:
        return pack_rows(encoded, cfg.max_length, seed, cls_id, sep_id)
    return build_sequences(encoded, cfg.max_length, cfg.max_steps * cfg.batch_size if needed is None else needed, seed,
                           cls_id, sep_id)


def batch_stream(sequences: list[list[int]] | np.ndarray, cfg: PretrainParams, vocab_size: int, seed: int,
                 world: World | None = None) -> EpochStream:
    """Endless freshly masked batches, a new shuffle every epoch, resumable: of packed rows (``pack_rows``: every
    batch the same shape) or of sequences (length-bucketed, padded). Under torchrun, this rank's share of each
    batch, masked with a generator of its own."""
    world = world or World()
    if isinstance(sequences, np.ndarray):
        rows = sequences  # a name of one type for the closure

        def make(index: np.ndarray, gen: torch.Generator) -> tuple[Tensor, ...]:
            ids = torch.from_numpy(rows[index].astype(np.int64))
            return masked_rows(ids, torch.ones_like(ids), cfg.mlm_probability, vocab_size, gen)

        lengths = np.full(len(rows), rows.shape[1])
    else:
        def make(index: np.ndarray, gen: torch.Generator) -> tuple[Tensor, ...]:
            return masked_batch([sequences[i] for i in index], cfg.mlm_probability, vocab_size, gen)

        lengths = np.asarray([len(s) for s in sequences])
    return EpochStream(lengths, cfg.batch_size, seed, make, shard=(world.rank, world.size))


def training_config(cfg: PretrainParams, model_cfg: ModelConfig) -> ModelConfig:
    """The model as pretraining builds it: the section's dropout and attention core where it sets them (neither
    has weights: the checkpoint is saved with ``model_cfg``, and fine-tuning builds what that says)."""
    dropout = {} if cfg.dropout is None else {"hidden_dropout": cfg.dropout, "attention_dropout": cfg.dropout}
    return dataclasses.replace(model_cfg, **dropout, **({} if cfg.attention is None else {"attention": cfg.attention}))


def mlm_step(model: MaskedLM, batch: tuple[Tensor, ...], padded: bool = True) -> tuple[Tensor, Tensor]:
    """A batch's loss and real tokens (a tensor: no host sync). A packed batch (``padded=False``) has no padding, so
    the model gets no attention mask and SDPA may take its fused kernels."""
    ids, mask, positions, labels = batch
    return mlm_loss(model(ids, mask if padded else None, masked_positions=positions), labels), mask.sum()


packed_mlm_step = functools.partial(mlm_step, padded=False)


def training_step(cfg: PretrainParams) -> Callable[..., tuple[Tensor, Tensor]]:
    """The step for the rows ``training_rows`` gives ``cfg``: packed rows need no attention mask."""
    return packed_mlm_step if cfg.packing else mlm_step


def held_out_batches(held_out: list[list[int]], vocab_size: int) -> list[tuple[Tensor, ...]]:
    """The fixed measurement's batches: sorted by length, masked once at ``EVAL_PROBABILITY`` with ``EVAL_SEED``."""
    gen = torch.Generator().manual_seed(EVAL_SEED)
    return [masked_batch([held_out[i] for i in idx], EVAL_PROBABILITY, vocab_size, gen)
            for idx in sorted_batches([len(s) for s in held_out], EVAL_BATCH)]


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
    ``bias_init``: unigram (the decoder bias at log unigram frequencies) | zeros (the ablation: it collapses).
    Returns the model (its dropout ``cfg.dropout`` when that is set: save it with ``model_cfg``) and the metrics."""
    world = world or World()
    world.check_batch(cfg.batch_size, "pretrain.batch_size")
    torch.manual_seed(shared.seed)
    if cfg.max_length > model_cfg.max_positions:
        raise ValueError(f"pretrain.max_length {cfg.max_length} exceeds model max_positions {model_cfg.max_positions}")
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    encoded = encode_documents(tok, texts)  # all of it, once
    held_out, train_docs = split_held_out(encoded, min(EVAL_LENGTH, model_cfg.max_positions), cls_id, sep_id)
    encoded = [encoded[i] for i in train_docs]
    eval_batches = held_out_batches(held_out, model_cfg.vocab_size)
    train = training_rows(encoded, cfg, shared.seed, cls_id, sep_id)
    model = build_mlm(training_config(cfg, model_cfg))
    init_metrics: dict = {}
    docs = [np.asarray(ids, dtype=np.int64) for ids in encoded]  # converted once, for both
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
                trained, batch_stream(train, cfg, model_cfg.vocab_size, shared.seed, world),
                training_step(cfg),
                cfg.optim(shared),
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
    tokens_seen = examples * (train.shape[1] if isinstance(train, np.ndarray) else float(np.mean([len(s) for s in train])))
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
        # the fixed measurement (module docstring): what its accuracy and loss were taken over
        "eval_sequences": len(held_out),
        "eval_masked_tokens": sum(len(b[3]) for b in eval_batches),
        "eval_max_length": min(EVAL_LENGTH, model_cfg.max_positions),
        "eval_mask_probability": EVAL_PROBABILITY,
        "train_documents": len(train_docs),
        "packed": cfg.packing,
        **budget_metrics,
        **init_metrics,
    }
    if result.steps:  # no training loss without a step (and no NaN in the metrics JSON)
        metrics["final_train_loss"] = result.last_loss
    return model.cpu().eval(), metrics
