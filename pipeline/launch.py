"""Run a stage module in one process, or in several under torchrun: what dvc.yaml's pretrain
and finetune commands call, so that ``processes`` in params.yaml picks the way.

    python -m pipeline.launch --processes 2 pipeline.stages.pretrain --corpus ... --out ...

One process: the module runs in this interpreter (no torchrun, no rendezvous). Several:
``torchrun --standalone --nproc_per_node N -m <module> ...`` on this machine; for several
machines, call torchrun yourself (README, "Scaling out").
"""

from __future__ import annotations

import os
import runpy
import sys


def command(processes: int, module: str, args: list[str]) -> list[str] | None:
    """The torchrun command for ``processes`` > 1; None when one process runs the module in place."""
    if processes < 1:
        raise SystemExit(f"error: --processes {processes}: need at least 1")
    if processes == 1:
        return None
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", "-m", module, *args]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] != "--processes":
        raise SystemExit("usage: python -m pipeline.launch --processes N <module> [args ...]")
    try:
        processes = int(argv[1])
    except ValueError:
        raise SystemExit(f"error: --processes {argv[1]!r} is not a whole number") from None
    module, args = argv[2], argv[3:]
    torchrun = command(processes, module, args)
    if torchrun is None:
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        os.execv(sys.executable, torchrun)


if __name__ == "__main__":
    main()
