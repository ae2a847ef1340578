"""The paper's published Tables 1-6 as data (arXiv 2505.06708v1), shipped with the package.

One CSV per table, one line per table row, in the paper's order; '-' where the paper reports nothing (Table 2
row 12 diverged; Table 5's 32k-trained models were not evaluated past 32k). Units: ``added_param_m`` in
millions of parameters; ``ppl``/``avg_ppl`` perplexity; benchmark columns in %; Table 5 columns RULER scores
per context length; Table 4 ``gate_score`` mean gate activation, ``m_act`` mean over layers of the per-layer
max |hidden state|, ``f_attn`` the share of attention on the first token.
"""
