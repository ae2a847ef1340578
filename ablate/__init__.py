"""ablate: architecture ablation studies of attention gating, from a grid file to the paper's tables."""

__version__ = "0.1.0"
