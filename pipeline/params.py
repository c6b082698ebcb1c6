"""The only reader of params.yaml: one typed, frozen dataclass a stage section.

Hyperparameters live in params.yaml (sectioned by stage); paths live in dvc.yaml. Unknown keys,
missing sections and wrong types fail here with the file and the dotted key named.
``model`` and ``distill.student`` are ``minibert.ModelConfig`` dicts (a ``preset`` key plus
overrides); their vocabulary size always comes from the trained tokenizer.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from minibert.config import ModelConfig
from minibert.train_config import OptimConfig
from minibert.validation import ConfigError, from_dict

DEFAULT_PATH = Path("params.yaml")
PROFILE_FILE = "profile.yaml"  # the active profile overlay beside params.yaml: `{}` runs the defaults
FREE_FORM = {"model", "distill.student"}  # a preset plus any ModelConfig overrides
FREE_FORM_PREFIXES = tuple(f"{section}." for section in FREE_FORM)
TEMPLATED = {"train.processes"}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # a dataset's (and a description file's) name  # dvc.yaml's ${...}: params.yaml's value, never an overlay's


@dataclass(frozen=True)
class DataParams:
    dataset: str = "sst2"  # what is trained and evaluated: the description datasets/<dataset>.yaml (pipeline.datasets)
    source: Literal["mirror", "hub"] = "mirror"  # mirror: dvc pull; hub: the descriptions' Hub sources (pipeline.hub)
    hub_revision: str | None = None  # for a Hub source whose description pins no revision

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.dataset):
            raise ConfigError(f"data.dataset: {self.dataset!r} is not a dataset name (letters, digits, '_' and '-'); it "
                              "names datasets/<dataset>.yaml")


@dataclass(frozen=True)
class PrepareParams:
    seed: int = 42  # salts the hash that carves splits: another seed, another split
    val_fraction: float = 0.05  # of the training rows (or groups) carved as validation when the dataset has none
    test_fraction: float = 0.1  # of the training rows (or groups) carved as the test split when the dataset has none
    max_train_rows: int | None = None  # subsample the training split (tiny profile); None = all
    max_dev_rows: int | None = None  # subsample the test split; None = all
    corpus_max_docs: int | None = None  # unlabelled texts in the pretraining corpus; None = all

    def __post_init__(self) -> None:
        check_ranges("prepare", self, {"val_fraction": "(0, 1)", "test_fraction": "(0, 1)", "max_train_rows": ">= 1",
                                       "max_dev_rows": ">= 1", "corpus_max_docs": ">= 1"})
        if self.val_fraction + self.test_fraction >= 1:
            raise ConfigError(f"prepare.val_fraction {self.val_fraction} + test_fraction {self.test_fraction} leave no "
                              "training rows; keep their sum below 1")

RULES: dict[str, tuple[Any, str]] = {
    "> 0": (lambda v: v > 0, "> 0"),
    ">= 0": (lambda v: v >= 0, ">= 0"),
    ">= 1": (lambda v: v >= 1, ">= 1"),
    "[0, 1]": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "[0, 1)": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "(0, 1)": (lambda v: 0 < v < 1, "in (0, 1)"),
    "(0, 1]": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "[0, 2**24]": (lambda v: 0 <= v <= 2**24, "in [0, 16777216] (2**24)"),
}


def check_ranges(section: str, obj: Any, rules: dict[str, str]) -> None:
    """ConfigError naming ``section.key``, its value and the allowed range for the first value out
    of range (None, for optional keys, is always allowed)."""
    for key, rule in rules.items():
        value = getattr(obj, key)
        ok, text = RULES[rule]
        if value is not None and not ok(value):
            raise ConfigError(f"{section}.{key}: {value} is out of range; expected {text}")


def check_window(section: str, cfg: Any) -> None:
    """Sliding windows need room for [CLS] x [SEP] and a step no longer than a window's body."""
    if cfg.max_length < 3 or not 0 < cfg.stride <= cfg.max_length - 2:
        raise ConfigError(f"{section}: need max_length >= 3 and 0 < stride <= max_length - 2; got {cfg}")


@dataclass(frozen=True)
class TaskParams:
    max_length: int = 64  # tokens a sequence or window, [CLS] and [SEP] included
    stride: int = 48  # window step for texts longer than max_length (consecutive windows overlap)
    aggregate: Literal["mean", "max", "first"] = "mean"  # window logits -> one prediction
    # long training texts keep their head, or head + tail, or become all their consecutive windows (each with the label)
    truncation: Literal["head", "head_tail", "windows"] = "head"

    def __post_init__(self) -> None:
        check_window("task", self)


@dataclass(frozen=True)
class TokenizerParams:
    vocab_size: int = 16000
    lowercase: bool = True

    def __post_init__(self) -> None:
        check_ranges("tokenizer", self, {"vocab_size": ">= 1"})


@dataclass(frozen=True)
class TrainParams:
    """What every training loop shares (pretrain, finetune, cnn, distill); each loop's own section sets its
    batch, length, budget, learning rate and warmup."""

    seed: int = 0  # initialisation, data order and every draw after the split (prepare.seed)
    processes: int = 1  # > 1: DistributedDataParallel under torchrun (pipeline.launch); batch sizes must divide by it
    precision: Literal["fp32", "bf16", "auto"] = "auto"  # bf16 autocast; auto: bf16 where native (minibert.precision)
    log_every: int = 25  # steps between logged training metrics
    eval_every: int = 500  # steps between validation passes of finetune and cnn (at most half an epoch); the best is kept
    weight_decay: float = 0.01
    schedule: str = "linear"  # decay after warmup: key of minibert.trainer.SCHEDULES
    schedule_clock: str = "steps"  # steps | budget (OptimConfig.schedule_clock)
    grad_clip: float = 1.0  # max global grad norm; 0 = off
    class_weights: Literal["none", "balanced"] = "none"  # balanced: each class's loss weighted n / (K n_class)

    def __post_init__(self) -> None:
        check_ranges("train", self, {"processes": ">= 1", "log_every": ">= 1", "eval_every": ">= 1",
                                     "weight_decay": ">= 0", "grad_clip": ">= 0"})
        try:
            self.optim(1.0, 0.0)
        except ConfigError as err:
            raise ConfigError(f"train.{err}") from None

    def optim(self, lr: float, warmup_ratio: float) -> OptimConfig:
        """A loop's optimizer: its own learning rate and warmup, the rest shared."""
        return OptimConfig(lr=lr, warmup_ratio=warmup_ratio, weight_decay=self.weight_decay, schedule=self.schedule,
                           schedule_clock=self.schedule_clock, grad_clip=self.grad_clip)


@dataclass(frozen=True)
class PretrainParams:
    max_length: int = 128  # tokens a training sequence, [CLS] and [SEP] included
    mlm_probability: float = 0.15
    batch_size: int = 16
    max_steps: int = 4000
    time_budget_min: float | None = 4.0  # stop early when spent; None = run max_steps
    lr: float = 1e-3
    warmup_ratio: float = 0.06
    checkpoint_every: int = 250  # steps between resumable checkpoints (a killed run continues); 0 = off
    compile: bool = False  # torch.compile the model (inductor; pays only for long runs, compiling takes a minute)
    eval_every: int = 200  # steps between held-out MLM evaluations (the curve's points); 0 = at the end only
    embedding_init: Literal["random", "ppmi_svd"] = "ppmi_svd"  # ppmi_svd: word vectors from corpus co-occurrences first
    packing: bool = True  # documents run on in rows of exactly max_length (no padding); false: one per row, padded
    dropout: float | None = 0.0  # every dropout while pretraining; None = the model section's
    schedule_clock: Literal["steps", "budget"] | None = "budget"  # what warmup and decay follow here; None = train.schedule_clock
    attention: Literal["eager", "sdpa"] | None = "eager"  # the attention core while pretraining (minibert.attention.ATTENTION); None = the model section's

    def optim(self, shared: TrainParams) -> OptimConfig:
        """Pretraining's optimizer: the shared one, its own LR, warmup and (where set) schedule clock."""
        optim = shared.optim(self.lr, self.warmup_ratio)
        return optim if self.schedule_clock is None else dataclasses.replace(optim, schedule_clock=self.schedule_clock)

    def __post_init__(self) -> None:
        check_ranges("pretrain", self, {"dropout": "[0, 1)", "mlm_probability": "(0, 1)", "batch_size": ">= 1", "max_steps": ">= 0", "time_budget_min": "> 0", "lr": "> 0", "warmup_ratio": "[0, 1)", "checkpoint_every": ">= 0", "eval_every": ">= 0"})


@dataclass(frozen=True)
class TransferParams:
    """Intermediate-task transfer (STILTs): one epoch on the intermediate task its dataset description names, before the task."""

    time_budget_min: float | None = 6.5
    max_length: int = 128  # tokens a training text (head and tail) / validation window; windows step 3/4 of it

    def __post_init__(self) -> None:
        check_ranges("finetune.transfer", self, {"time_budget_min": "> 0"})
        if self.max_length < 4:
            raise ConfigError(f"finetune.transfer.max_length: {self.max_length} is out of range; expected >= 4")


@dataclass(frozen=True)
class FinetuneParams:
    batch_size: int = 32
    epochs: float = 1.0
    time_budget_min: float | None = 4.5
    pooling: Literal["cls", "mean", "max"] = "mean"
    dropout: float = 0.1
    lr: float = 1e-4
    warmup_ratio: float = 0.1
    llrd: float = 1.0  # layer-wise LR decay: layer l of L trains at lr * llrd^(L-1-l); 1.0 = off
    unfreeze_every: int = 0  # steps between thawing backbone layers top-down (ULMFiT); 0 = off
    adversarial: Literal["none", "fgm", "pgd"] = "none"  # perturbations of the word embeddings
    adv_epsilon: float = 0.1  # FGM / PGD perturbation norm (embeddings start at std 0.02: 1.0 swamps them)
    transfer: TransferParams = field(default_factory=TransferParams)

    def __post_init__(self) -> None:
        check_ranges("finetune", self, {"batch_size": ">= 1", "epochs": "> 0", "time_budget_min": "> 0", "dropout": "[0, 1)", "lr": "> 0", "warmup_ratio": "[0, 1)", "llrd": "(0, 1]", "unfreeze_every": ">= 0", "adv_epsilon": "> 0"})


@dataclass(frozen=True)
class BaselineParams:
    ngram_max: int = 2
    min_df: int = 2
    C: float = 4.0

    def __post_init__(self) -> None:
        check_ranges("baseline", self, {"ngram_max": ">= 1", "min_df": ">= 1", "C": "> 0"})


@dataclass(frozen=True)
class CNNParams:
    """The word-level CNN (``minibert.textcnn``, Kim 2014) over the pretrained encoder's word vectors:
    a soft-target source for distillation (``soft_targets.shares.word_cnn``); off at share 0."""

    widths: tuple[int, ...] = (1, 2, 3, 4, 5)  # n-gram widths of the convolutions
    filters: int = 128  # feature maps a width
    dropout: float = 0.5
    batch_size: int = 64
    epochs: float = 2.0
    time_budget_min: float | None = 5.5  # shrinks with the pipeline's deadline (phase "cnn")
    lr: float = 1e-3
    warmup_ratio: float = 0.06
    bag_buckets: int = 0  # hashed token uni- and bigram slots of a bag branch (minibert.ngram_bag, fastText); 0 = none
    bag_lr_scale: float = 30.0  # the bag's learning rate over the optimizer's, here and in a word_cnn student's distillation
    # tokens the word-CNN reads a sequence or window, and its window step (null: the task's); it has no
    # positions, so it may read longer than the encoder; a word_cnn student keeps them through export and serving
    max_length: int | None = None
    stride: int | None = None

    def __post_init__(self) -> None:
        check_ranges("cnn", self, {"bag_buckets": "[0, 2**24]", "bag_lr_scale": "> 0", "filters": ">= 1", "dropout": "[0, 1)", "batch_size": ">= 1", "epochs": "> 0", "time_budget_min": "> 0",
                                   "lr": "> 0", "warmup_ratio": "[0, 1)"})
        if not self.widths or min(self.widths) < 1:
            raise ConfigError(f"cnn.widths: {list(self.widths)} is out of range; expected one or more widths, each >= 1")
        if (self.max_length is None) != (self.stride is None):
            raise ConfigError("cnn.max_length and cnn.stride: set both (the word-CNN's own windows) or neither (the task's)")
        if self.max_length is not None and (self.max_length < 3 or not 0 < self.stride <= self.max_length - 2):
            raise ConfigError(f"cnn.max_length {self.max_length} / cnn.stride {self.stride}: need max_length >= 3 "
                              "and 0 < stride <= max_length - 2")


@dataclass(frozen=True)
class SharesParams:
    """Each source's share of the averaged probabilities; they sum to 1, and a source at 0 computes nothing."""

    teacher: float = 0.334  # the fine-tuned teacher (stage teacher_logits)
    tfidf: float = 0.333  # TF-IDF + LR, out of fold (stage baseline_oof)
    word_cnn: float = 0.333  # the word-level CNN (stage cnn)

    def __post_init__(self) -> None:
        check_ranges("soft_targets.shares", self, {"teacher": "[0, 1]", "tfidf": "[0, 1]", "word_cnn": "[0, 1]"})
        if abs(self.teacher + self.tfidf + self.word_cnn - 1.0) > 1e-6:
            raise ConfigError(f"soft_targets.shares.teacher: {self.teacher} + tfidf {self.tfidf} + word_cnn "
                              f"{self.word_cnn} must sum to 1")

    def of(self) -> dict[str, float]:
        """Each source's share, in the order the average adds them."""
        return {"teacher": self.teacher, "tfidf": self.tfidf, "word_cnn": self.word_cnn}


@dataclass(frozen=True)
class SoftTargetsParams:
    """The one seam distillation reads (stage soft_targets): its sources and their shares."""

    shares: SharesParams = field(default_factory=SharesParams)


@dataclass(frozen=True)
class TransferSetParams:
    """Unlabelled texts (stage transfer_set, from the IMDb unlabelled reviews) the student also learns
    the soft targets on; 0 rows = the labelled training rows only."""

    rows: int = 100000  # sentences in the transfer set (pipeline.transfer_texts); 0 = off

    def __post_init__(self) -> None:
        check_ranges("transfer_set", self, {"rows": ">= 0"})


@dataclass(frozen=True)
class DistillParams:
    # transformer: a minibert of `student` shape started from the teacher; word_cnn: the cnn stage's
    # word-level CNN (minibert.textcnn) trained on further, on the same soft targets (Tang et al. 2019)
    student_kind: Literal["transformer", "word_cnn"] = "word_cnn"
    student: dict[str, Any] = field(default_factory=lambda: {"preset": "tiny", "num_heads": 4, "intermediate_size": 256})
    temperature: float = 2.0
    alpha: float = 0.5  # weight of the soft (teacher) term; 1 - alpha on the labels
    hidden_weight: float = 0.0  # TinyBERT hidden-state MSE through a learned projection (0 = off)
    attention_weight: float = 0.0  # head-averaged attention KL (0 = off)
    batch_size: int = 64
    epochs: float = 1.0
    time_budget_min: float | None = 2.5
    lr: float = 3e-4
    warmup_ratio: float = 0.1
    # word_cnn students trained from the cnn stage's model with seeds train.seed + 0 .. soup - 1, their weights
    # averaged (a uniform model soup, Wortsman et al. 2022); time_budget_min is each one's cap
    soup: int = 3

    def __post_init__(self) -> None:
        check_ranges("distill", self, {"batch_size": ">= 1", "epochs": "> 0", "time_budget_min": "> 0", "lr": "> 0",
                                       "warmup_ratio": "[0, 1)", "soup": ">= 1"})
        if self.temperature <= 0:
            raise ConfigError(f"distill.temperature: {self.temperature} must be > 0")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"distill.alpha: {self.alpha} is out of range; expected [0, 1]")
        for key in ("hidden_weight", "attention_weight"):
            if getattr(self, key) < 0:
                raise ConfigError(f"distill.{key}: {getattr(self, key)} must be >= 0 (0 = off)")
        if self.soup > 1 and self.student_kind != "word_cnn":
            raise ConfigError(f"distill.soup: {self.soup} averages word_cnn students, which all start from the cnn stage's "
                              "model; a transformer student's layers start partly at random: set soup: 1 or student_kind: word_cnn")
        if self.student_kind == "word_cnn" and (self.hidden_weight or self.attention_weight):
            raise ConfigError("distill.hidden_weight / attention_weight: a word_cnn student has no layers to match; "
                              "set both to 0 or student_kind: transformer")


@dataclass(frozen=True)
class QuantizeParams:
    """The deployed graph: calibrated static int8 of the portable graph (``pipeline.stages.quantize``)."""

    calibration_texts: int = 512  # training texts whose windows set the activation ranges (seeded by train.seed)
    per_channel: bool = True  # one weight scale an output channel instead of one a tensor

    def __post_init__(self) -> None:
        check_ranges("quantize", self, {"calibration_texts": ">= 1"})


@dataclass(frozen=True)
class ExportParams:
    # the deployed model's intra-op threads: the parity checks, quantize's and evaluate's scoring and throughput,
    # the served model's session (batch-1 latency is timed on one thread)
    threads: int = 2
    ort_optimizer: bool = False  # ORT's transformer optimiser (SkipLayerNorm, BiasGelu) over the fused graph

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError(f"export.threads: {self.threads} must be >= 0 (0 lets ONNX Runtime choose)")


@dataclass(frozen=True)
class RegisterParams:
    model_name: str = "minibert-sst2"
    min_accuracy: float = 0.0  # refuse to register below this dev accuracy

    def __post_init__(self) -> None:
        check_ranges("register", self, {"min_accuracy": "[0, 1]"})


@dataclass(frozen=True)
class PromoteParams:
    metric: Literal["accuracy", "macro_f1"] = "accuracy"  # what the gate compares on the test split of record
    margin: float = 0.0  # the challenger may trail the champion's metric by this much and still win
    max_p50_ms: float = 5.0  # single-text p50 latency budget of the challenger (1 thread)

    def __post_init__(self) -> None:
        if not -1.0 <= self.margin <= 1.0:
            raise ConfigError(f"promote.margin: {self.margin} is out of range; expected [-1, 1] (accuracy points / 100)")
        check_ranges("promote", self, {"max_p50_ms": "> 0"})


@dataclass(frozen=True)
class BudgetsParams:
    # time: each training loop stops at its time budget, and the budgets shrink together to end the run by
    # ``deadline.minutes`` (outputs then depend on the host's speed); steps: no budgets and no deadline, every loop
    # runs its steps or epochs (the same params give the same model on any host of a kind, in whatever time it takes)
    mode: Literal["time", "steps"] = "time"


@dataclass(frozen=True)
class DeadlineParams:
    minutes: float | None = 30.0  # the whole run through `minibert pipeline` / the Prefect flow; None = off

    def __post_init__(self) -> None:
        check_ranges("deadline", self, {"minutes": "> 0"})


@dataclass(frozen=True)
class TrackingParams:
    experiment: str = "minibert"


@dataclass(frozen=True)
class Params:
    data: DataParams = field(default_factory=DataParams)
    prepare: PrepareParams = field(default_factory=PrepareParams)
    task: TaskParams = field(default_factory=TaskParams)
    tokenizer: TokenizerParams = field(default_factory=TokenizerParams)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "mini"})
    train: TrainParams = field(default_factory=TrainParams)
    pretrain: PretrainParams = field(default_factory=PretrainParams)
    finetune: FinetuneParams = field(default_factory=FinetuneParams)
    baseline: BaselineParams = field(default_factory=BaselineParams)
    cnn: CNNParams = field(default_factory=CNNParams)
    transfer_set: TransferSetParams = field(default_factory=TransferSetParams)
    soft_targets: SoftTargetsParams = field(default_factory=SoftTargetsParams)
    distill: DistillParams = field(default_factory=DistillParams)
    quantize: QuantizeParams = field(default_factory=QuantizeParams)
    export: ExportParams = field(default_factory=ExportParams)
    register: RegisterParams = field(default_factory=RegisterParams)
    promote: PromoteParams = field(default_factory=PromoteParams)
    budgets: BudgetsParams = field(default_factory=BudgetsParams)
    deadline: DeadlineParams = field(default_factory=DeadlineParams)
    tracking: TrackingParams = field(default_factory=TrackingParams)

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The teacher's ModelConfig with the tokenizer's vocabulary size."""
        return ModelConfig.from_dict({**self.model, "vocab_size": vocab_size}, where="model")

    def student_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig.from_dict({**self.distill.student, "vocab_size": vocab_size}, where="distill.student")

    def cnn_task(self) -> TaskParams:
        """The task as the word-CNN reads it: its own window length and step when ``cnn.max_length`` is set."""
        if self.cnn.max_length is None:
            return self.task
        return dataclasses.replace(self.task, max_length=self.cnn.max_length, stride=self.cnn.stride)


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections, got {type(raw).__name__}")
    return raw


def overlaid(base: dict[str, Any], overlay: dict[str, Any], where: Path, prefix: str = "") -> dict[str, Any]:
    """``base`` with ``overlay``'s values in place of its own, section by section. An overlay only sets keys the
    base has (``FREE_FORM`` sections, a model's preset and overrides, take any); a list is replaced whole."""
    merged = dict(base)
    for key, value in overlay.items():
        dotted = f"{prefix}{key}"
        if key not in base and prefix.rstrip(".") not in FREE_FORM:
            raise ConfigError(f"{where}: {dotted} is not a key of params.yaml; an overlay sets keys params.yaml has "
                              "(check the spelling, or add the key to params.yaml with its default)")
        if dotted in TEMPLATED and value != base.get(key):
            raise ConfigError(f"{where}: {dotted} is read by dvc.yaml's command templating, which sees params.yaml "
                              "alone; set it in params.yaml")
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = overlaid(base[key], value, where, f"{dotted}.")
        else:
            merged[key] = value
    return merged


def load_params(path: str | os.PathLike[str] | None = None, profile: str | os.PathLike[str] | None = None,
                overrides: dict[str, Any] | None = None) -> Params:
    """Read and validate params.yaml (or ``path``) under the active profile overlay: ``profile`` or, when
    None, the ``profile.yaml`` beside it (``minibert pipeline --profile NAME`` writes it), then ``overrides``
    ({"section.key": value}, as ``dvc exp run -S`` sets them); every error names the file and the key."""
    path = Path(path or os.environ.get("MINIBERT_PARAMS", DEFAULT_PATH))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: params file not found; run from the project root or set MINIBERT_PARAMS")
    raw = read_yaml(path)
    overlay = Path(profile) if profile is not None else path.with_name(PROFILE_FILE)
    if overlay.is_file() and overlay.resolve() != path.resolve():
        raw = overlaid(raw, read_yaml(overlay), overlay)
        under = f" (under the profile {overlay})"
    else:
        under = ""
    if overrides:
        raw = overlaid(raw, unflatten(overrides), Path("overrides"))
    written = set(flatten(raw))
    missing = sorted(k for k in flatten(Params()) if k not in written and not k.startswith(FREE_FORM_PREFIXES))
    if missing:  # a dataclass default would decide it, where DVC cannot see it
        raise ConfigError(f"{path}: missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; params.yaml holds "
                          "every default (copy the key from the repository's params.yaml; a profile lists only what differs)")
    try:
        params = from_dict(Params, raw)
        for section, model in (("model", params.model), ("distill.student", params.distill.student)):
            if "vocab_size" in model:
                raise ConfigError(f"{section}.vocab_size: set tokenizer.vocab_size instead; models take the tokenizer's size")
        if params.distill.student_kind == "word_cnn" and params.soft_targets.shares.word_cnn == 0:
            raise ConfigError("distill.student_kind: 'word_cnn' starts from the cnn stage's model, which is trained only when "
                              "soft_targets.shares.word_cnn is above 0; raise that share or set student_kind: transformer")
        if params.cnn.max_length is not None and params.task.truncation == "windows":
            raise ConfigError("cnn.max_length: with task.truncation 'windows' every window is a training row, and the "
                              "word-CNN's rows must be the teacher's; set cnn.max_length and cnn.stride to null")
        # The model sections are free-form dicts until a vocabulary is known: validate them now.
        teacher, student = params.model_config(vocab_size=30000), params.student_config(vocab_size=30000)
        lengths = [("task.max_length", params.task.max_length, "model", teacher),
                   ("task.max_length", params.task.max_length, "distill.student", student),
                   ("pretrain.max_length", params.pretrain.max_length, "model", teacher),
                   ("finetune.transfer.max_length", params.finetune.transfer.max_length, "model", teacher)]
        for key, length, section, cfg in lengths:
            if length > cfg.max_positions:
                raise ConfigError(f"{key}: {length} tokens do not fit {section}'s max_positions ({cfg.max_positions}); "
                                  f"lower {key} or raise {section}.max_positions")
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}{under}") from None
    return fixed_steps(params) if params.budgets.mode == "steps" else params


def fixed_steps(params: Params) -> Params:
    """``budgets.mode: steps``: the params with every time budget and the deadline off, so each loop runs
    its steps or epochs whatever the host's speed."""
    replace = dataclasses.replace
    finetune = params.finetune
    return replace(
        params,
        pretrain=replace(params.pretrain, time_budget_min=None),
        finetune=replace(finetune, time_budget_min=None, transfer=replace(finetune.transfer, time_budget_min=None)),
        cnn=replace(params.cnn, time_budget_min=None),
        distill=replace(params.distill, time_budget_min=None),
        deadline=replace(params.deadline, minutes=None),
    )


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """{"a.b.c": value} as nested sections."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dataclasses / dicts as {"a.b.c": value}, for MLflow params."""
    import dataclasses

    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): obj}
