#!/usr/bin/env bash
# Issue 4's GPU target in one command, for a device lease of a few minutes (benchmarks/JOURNAL.md,
# "SST-2 quality on one H200 GPU"): CUDA-vs-CPU parity first, then profiles/gpu.yaml's
# pretraining and fine-tuning (benchmarks/quality.py, the teacher saved), then the word-CNN and
# TF-IDF beside that teacher (benchmarks/cnn_ensemble.py, SST-2 dev of each model and mix).
#
#   bash benchmarks/gpu_session.sh DATA TOKENIZER RESULTS [extra quality.py arguments]
#
# DATA: the default profile's prepared data (the GPU profile's data, prepare and tokenizer
# sections equal it), TOKENIZER its tokenizer.json, RESULTS a folder for the JSON records and
# the run's models. PYTHON (default python3) runs the scripts; BUDGET_S (default 580) is the wall
# time the whole command must end in: quality.py's budgets shrink to leave the CNN its share, and
# pretrain.max_steps is fitted to what is left (--calibrate-steps), so the LR schedule ends with it.
# Any other argument goes to quality.py (say, -S pretrain.time_budget_min=0.2 for a dry run on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?prepared data folder}; tokenizer=${2:?tokenizer.json}; results=${3:?results folder}; shift 3
python=${PYTHON:-python3}
start=$(date +%s)
deadline=$(( start + ${BUDGET_S:-580} ))
cnn_reserve_s=${CNN_RESERVE_S:-150}  # TF-IDF on SST-2 + IMDb, three CNN seeds, scoring: 100-130 s measured on a CPU beside an H200
mkdir -p "$results"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
"$python" benchmarks/cuda_parity.py --out "$results/cuda_parity.json" || echo "cuda_parity: a bound broken (see above)"
"$python" benchmarks/quality.py --profile profiles/gpu.yaml --data "$data" --tokenizer "$tokenizer" --threads 8 \
    --device "${DEVICE:-cuda}" --tag gpu-session --deadline $(( deadline - cnn_reserve_s )) \
    --calibrate-steps "${CALIBRATE_STEPS:-300}" \
    --save "$results/run/models/pretrain/model.safetensors" \
    --save-classifier "$results/run/models/finetune/model.safetensors" --out "$results/gpu_quality.json" "$@"
"$python" benchmarks/cnn_ensemble.py --profile profiles/gpu.yaml --data "$data" --tokenizer "$tokenizer" --threads 8 \
    --root "$results/run" --seeds 0,1,2 -S soft_targets.shares.teacher=0.334 -S soft_targets.shares.tfidf=0.333 -S soft_targets.shares.word_cnn=0.333 \
    ${CNN_ARGS:-}
tail -n 1 benchmarks/results/cnn_ensemble.jsonl > "$results/cnn_ensemble.json"
echo "gpu_session: $(( $(date +%s) - start )) s in all"
