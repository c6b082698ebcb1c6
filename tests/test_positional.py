"""Sinusoidal table against the closed form; rotary scores depend on relative offset only."""

import math

import torch

from minibert.positional import Rotary, SinusoidalPositions, sinusoidal_table


def test_sinusoidal_table_matches_closed_form() -> None:
    dim, positions = 16, 50
    table = sinusoidal_table(positions, dim)
    assert table.shape == (positions, dim)
    for p in (0, 1, 7, 49):
        for i in range(dim // 2):
            angle = p / 10000 ** (2 * i / dim)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_sinusoidal_positions_have_no_parameters_and_no_state() -> None:
    module = SinusoidalPositions(32, 8)
    assert list(module.parameters()) == []
    assert module.state_dict() == {}
    torch.testing.assert_close(module(5), sinusoidal_table(32, 8)[:5])


def test_a_built_model_scales_the_sinusoidal_table_to_the_token_embeddings() -> None:
    """RMS of the fixed table == initializer_range, the std the token embeddings start at."""
    from minibert import ModelConfig
    from minibert.model import build_backbone

    cfg = ModelConfig.preset("tiny", vocab_size=100, position="sinusoidal")
    table = build_backbone(cfg).embeddings.positions.table
    assert math.isclose(float(table.pow(2).mean().sqrt()), cfg.initializer_range, rel_tol=1e-3)
    torch.testing.assert_close(table / (cfg.initializer_range * math.sqrt(2)), sinusoidal_table(cfg.max_positions, cfg.hidden_size))


def rotated_scores(rotary: Rotary, t: int, d: int) -> torch.Tensor:
    """Scores S[m, n] of one fixed q vector at every position against one fixed k vector."""
    q = torch.randn(d).expand(1, 1, t, d)  # same content at every position
    k = torch.randn(d).expand(1, 1, t, d)
    rq, rk = rotary(q, k)
    return (rq @ rk.transpose(-2, -1))[0, 0]  # (T, T)


def test_rope_scores_depend_only_on_relative_offset() -> None:
    t, d = 12, 8
    scores = rotated_scores(Rotary(d, 64, 10000.0), t, d)
    for offset in range(-t + 1, t):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5, rtol=1e-5)
    assert not torch.isclose(scores[0, 1], scores[0, 3]), "scores must change with the offset"


def test_rope_preserves_vector_norms_and_leaves_position_zero_unchanged() -> None:
    rotary = Rotary(8, 16, 10000.0)
    q, k = torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)
    rq, rk = rotary(q, k)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(rq[:, :, 0], q[:, :, 0])
    assert not torch.allclose(rq[:, :, 1], q[:, :, 1])
