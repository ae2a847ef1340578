"""Size presets: named shapes for the model. ``tiny`` / ``tiny-moe`` for tests and CPU, the paper's for scale.

A preset is plain data: a mapping of ``ModelConfig`` field names to values. Any field given next to
``preset`` in a grid overrides the preset's value.
"""

from __future__ import annotations

PRESETS: dict[str, dict[str, object]] = {
    "tiny": dict(
        n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=192,
        vocab_size=320, tie_embeddings=True,
    ),
    "tiny-moe": dict(
        n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=192,
        vocab_size=320, tie_embeddings=True, n_experts=4, expert_dim=64, moe_top_k=2,
    ),
    "small": dict(
        n_layers=6, d_model=256, n_heads=8, n_kv_heads=4, head_dim=32, ffn_dim=768,
        vocab_size=512, tie_embeddings=True,
    ),
    # Qwen-MoE 15A2B shapes of the paper (Sec. 3.1): 24 layers, 2048 wide, 32 q heads, 4 kv heads, head dim
    # 128, 128 fine-grained experts, top-8.
    "paper-moe-15a2b": dict(
        n_layers=24, d_model=2048, n_heads=32, n_kv_heads=4, head_dim=128, ffn_dim=6144,
        vocab_size=151936, tie_embeddings=False, n_experts=128, expert_dim=768, moe_top_k=8,
        rope_theta=1_000_000.0,
    ),
    # Qwen3-1.7B shapes.
    "paper-dense-1.7b": dict(
        n_layers=28, d_model=2048, n_heads=16, n_kv_heads=8, head_dim=128, ffn_dim=6144,
        vocab_size=151936, tie_embeddings=True, rope_theta=1_000_000.0,
    ),
    # The paper's 48-layer 1.7B-parameter dense model (Table 2 rows 5-14).
    "paper-dense-1.7b-48l": dict(
        n_layers=48, d_model=1536, n_heads=16, n_kv_heads=8, head_dim=128, ffn_dim=4608,
        vocab_size=151936, tie_embeddings=True, rope_theta=1_000_000.0,
    ),
}
