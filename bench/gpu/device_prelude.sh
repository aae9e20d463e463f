# Sourced first by a device call's script (run from the repository root on the GPU machine, with
# $OUT set by the device tool): CUDA libraries on the path, everything printed also kept in
# $OUT/log.txt, the carried binaries unpacked from .gpuc/pack.tar.xz and reachable at the path
# they were built in, and the card and commit named at the top of the log.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
rm -rf .gpu
tar -xJf .gpuc/pack.tar.xz
built_in=$(cat .gpu/built-in)
[ -e "$built_in" ] || { mkdir -p "$(dirname "$built_in")"; ln -s "$PWD" "$built_in"; }
nvidia-smi --query-gpu=name --format=csv,noheader
date
cut -c1-8 .gpu/head
