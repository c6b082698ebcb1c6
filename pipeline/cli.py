"""The ``minibert`` command line."""

from __future__ import annotations

import argparse
import sys

from minibert.config import PRESETS
from minibert.model import build_mlm


def count_parameters(name: str) -> tuple[int, int]:
    """(all, non-embedding) parameter counts of a preset's MLM model."""
    model = build_mlm(PRESETS[name])
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    return total, total - embedding


def cmd_presets(args: argparse.Namespace) -> int:
    print(f"{'preset':<8}{'layers':>7}{'hidden':>8}{'heads':>7}{'params (M)':>12}{'non-emb (M)':>13}")
    for name, cfg in PRESETS.items():
        total, non_embedding = count_parameters(name)
        print(f"{name:<8}{cfg.num_layers:>7}{cfg.hidden_size:>8}{cfg.num_heads:>7}{total / 1e6:>12.2f}{non_embedding / 1e6:>13.2f}")
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    print(
        "minibert pipeline: the DVC pipeline is not built yet (issue 3). "
        "The library and its tests are in place: run `make test`.",
        file=sys.stderr,
    )
    return 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minibert", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list model presets and their sizes").set_defaults(func=cmd_presets)
    sub.add_parser("pipeline", help="run the whole pipeline on the default profile").set_defaults(func=cmd_pipeline)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
