"""Dynamic MLM masking (BERT's 80/10/10 rule), a pure function of ids and a generator.

Reference: Devlin et al. 2018, section 3.1 and appendix A.1, as implemented by
``transformers.DataCollatorForLanguageModeling``: each maskable token is selected with
probability p; a selected token becomes [MASK] 80 % of the time, a random token 10 %,
and stays itself 10 %; the loss is taken at selected positions only. Departure: random
replacements are drawn from the non-special vocabulary only, so [PAD]/[CLS]/[SEP] never
appear inside a sentence.

Shape legend: B batch, T sequence length.
"""

from __future__ import annotations

import torch
from torch import Tensor

IGNORE_INDEX = -100  # label of positions that carry no loss, as torch's cross_entropy default


def mask_tokens(
    input_ids: Tensor,
    maskable: Tensor,
    mask_id: int,
    first_regular_id: int,
    vocab_size: int,
    probability: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Returns (masked input ids (B, T), labels (B, T) with IGNORE_INDEX where not selected).

    maskable: bool (B, T), False at special tokens and padding. Random replacements are drawn
    uniformly from [first_regular_id, vocab_size). The input is not modified.
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"mlm probability must be in (0, 1), got {probability}")
    rand = torch.rand(input_ids.shape, generator=generator)
    selected = (rand < probability) & maskable
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    # Re-use one more uniform draw to split the selected positions 80 / 10 / 10.
    split = torch.rand(input_ids.shape, generator=generator)
    to_mask = selected & (split < 0.8)
    to_random = selected & (split >= 0.8) & (split < 0.9)
    random_ids = torch.randint(first_regular_id, vocab_size, input_ids.shape, generator=generator)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(to_random, random_ids, masked)
    return masked, labels
