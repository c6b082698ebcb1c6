"""The names each string choice of a config may take, free of torch so that configs load without it.

Each tuple lists, in order, the keys of the dispatch dict that implements the choice
(``attention.ATTENTION``, ``heads.POOLING``, ...). ``tests/test_choices.py`` checks that each pair
agrees, so a new implementation is one entry in its dict and one name here. The pipeline's light
stages (prepare, tokenizer, register, report) and the CLI read params through these names and
never import torch, which saves each of those processes about 2 s of start-up.
"""

ATTENTION = ("eager", "sdpa")  # attention.ATTENTION
POOLING = ("cls", "mean", "max")  # heads.POOLING
ACTIVATIONS = ("gelu", "relu")  # layers.ACTIVATIONS
NORM_STYLES = ("post", "pre")  # layers.NORM_STYLES
POSITIONS = ("learned", "sinusoidal", "rotary")  # positional.POSITIONS
SCHEDULES = ("linear", "cosine", "constant")  # trainer.SCHEDULES
SCHEDULE_CLOCKS = ("steps", "budget")  # the two branches of trainer.build_scheduler
PRECISIONS = ("fp32", "bf16")  # precision.PRECISIONS
PRECISION_CHOICES = (*PRECISIONS, "auto")  # what a config may say; "auto" resolves to one of PRECISIONS
