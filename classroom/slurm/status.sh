#!/bin/bash
# `make slurm-status OUT=...`: where the grading that `make slurm-grade` submitted into OUT stands: its jobs in Slurm's
# queue, each shard's latest progress line and exit status, and the merge's outcome.
set -uo pipefail
out=${1:?usage: $0 OUT}
[ -f "$out/slurm/jobs" ] || { echo "make slurm-status: no grading submitted into $out (no $out/slurm/jobs)" >&2; exit 2; }
read -r array merge < "$out/slurm/jobs"
queued=$(squeue --noheader --jobs="$array,$merge" --format="%i %T %M %R" 2>/dev/null)
echo "${queued:-jobs $array and $merge: no longer in the queue}"
for log in "$out"/slurm/shard-*.out; do
  [ -e "$log" ] || continue
  shard=$(basename "$log" .out)
  status=$(cat "$out/slurm/$shard.status" 2>/dev/null || echo "running or never ended")
  echo "$shard: exit status $status; $(grep -E '^(\[[0-9]+/[0-9]+\]|shard [0-9]+/[0-9]+: grading)' "$log" | tail -n 1)"
done
if [ -f "$out/slurm/merge.out" ]; then  # what it joined, or what failed and the command that reruns it
  grep -E '^(joined |nothing merged|  make slurm-grade)' "$out/slurm/merge.out" | sed 's/^ */merge: /'
fi
exit 0
