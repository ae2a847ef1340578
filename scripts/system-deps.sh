#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing: PostgreSQL 15, headless Chromium, Slurm with munge
# (the Slurm tests start a real one-node cluster with scripts/slurm.sh; they never skip for want of binaries),
# and pdflatex with booktabs (texlive-latex-base, texlive-latex-recommended): the reports' LaTeX is compiled.
set -euo pipefail
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v pdflatex >/dev/null 2>&1 || need+=(texlive-latex-base)
kpsewhich booktabs.sty >/dev/null 2>&1 || need+=(texlive-latex-recommended)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
