#!/bin/bash
# `make slurm-grade`: a class graded on Slurm, as a job array of shards (grade-shard.sbatch) and a merge job that
# waits for all of them (merge.sbatch, --dependency=afterany).
#
#   classroom/slurm/submit.sh SUBMISSIONS OUT SHARDS [ONLY]
#
# ONLY (e.g. 2 or 1,3): submit those shards only, with a new merge after them (a failed shard's rerun). SLURM_ARGS
# (sbatch's options for the shards, e.g. --partition=cpu --cpus-per-task=16) and GRADE_ARGS (autograder grade's) come
# from the environment, and GRADER_PYTHON names the venv's Python. Everything lands in OUT: the shards' folders
# OUT/shard-i, the merged grades, and OUT/slurm/ (the jobs' output, the shards' exit status, this command).
set -euo pipefail
if [ $# -lt 3 ] || ! [[ $3 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 SUBMISSIONS OUT SHARDS [ONLY] (SHARDS a number >= 1; ONLY a list like 2 or 1,3)" >&2
  exit 2
fi
submissions=$1 out=$2 shards=$3 only=${4:-}
if [ -n "$only" ] && ! [[ $only =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
  echo "make slurm-grade: ONLY=$only: expected shard numbers separated by commas, like 2 or 1,3" >&2
  exit 2
fi
for shard in ${only//,/ }; do
  if [ "$shard" -gt "$shards" ]; then echo "make slurm-grade: ONLY=$only: there are $shards shards" >&2; exit 2; fi
done
[ -d "$submissions" ] || { echo "make slurm-grade: $submissions is not a folder of submissions" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "make slurm-grade: no sbatch here: run it on a Slurm login node" >&2; exit 2; }
mkdir -p "$out/slurm"
printf 'make slurm-grade SUBMISSIONS=%q OUT=%q SHARDS=%s SLURM_ARGS=%q GRADE_ARGS=%q\n' "$submissions" "$out" \
  "$shards" "${SLURM_ARGS:-}" "${GRADE_ARGS:-}" > "$out/slurm/command"
for shard in $(seq 1 "$shards"); do  # the shards about to run: their status is theirs to write again
  if [ -z "$only" ] || [[ ,$only, == *,$shard,* ]]; then rm -f "$out/slurm/shard-$shard.status"; fi
done
# shellcheck disable=SC2086  # SLURM_ARGS and GRADE_ARGS are lists of words
array=$(sbatch --parsable --array="${only:-1-$shards}" --output="$out/slurm/shard-%a.out" ${SLURM_ARGS:-} \
  classroom/slurm/grade-shard.sbatch "$submissions" "$out" "$shards" ${GRADE_ARGS:-})
array=${array%%;*}  # --parsable: "id" or "id;cluster"
merge=$(sbatch --parsable --dependency="afterany:$array" --output="$out/slurm/merge.out" \
  classroom/slurm/merge.sbatch "$out" "$shards")
merge=${merge%%;*}
echo "$array $merge" > "$out/slurm/jobs"
echo "submitted shards ${only:-1-$shards} of $shards as job array $array, and their merge as job $merge (after them)"
echo "  progress: make slurm-status OUT=$out   (squeue -j $array,$merge; a line per graded submission in $out/slurm/)"
echo "  grades:   $out/grades.csv, once job $merge has ended ($out/slurm/merge.out says what happened)"
