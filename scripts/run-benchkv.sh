#!/usr/bin/env bash
# The README's run command: installs what building and running benchkv needs, builds it,
# and runs `mpirun -np 2 benchkv` on its defaults (software device model, a short run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --run-only
cargo build --release -p benchkv
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
exec mpirun -np 2 target/release/benchkv "$@"
