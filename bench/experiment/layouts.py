"""The papers' tables as data: a grid file names one (`report: {table: ...}`), and the report
fills its columns from the runs. Each column is (header, source column of the runs, kind);
kinds: text (as is), bpc (mean ± std, bold minimum, significance marker), count (K/M/G), flops
(K/M/G, bold minimum), span (characters), floor (a bpc the setup fixes), rate and MB (this
machine's throughput and memory: K/M/G, whole MB). The table adds, after them, each probe's
test bits per answer (what the claims read) and floor where the runs scored probes, then the
runs' tokens/s and peak memory (`bench.findings.presentation.tables`)."""

DEV, TEST = ("dev", "final_dev_bpc", "bpc"), ("test", "final_test_bpc", "bpc")
PARAMS, MODEL = ("#Params", "params", "count"), ("Model", "label", "text")
MULTIPLIES = ("Multiplies/token", "flops", "flops")

LAYOUTS = {  # name: (title, columns)
    "as_table1": ("Adaptive-span Table 1", [MODEL, ("#layers", "model.n_layers", "text"),
                  ("Avg. span", "mean_span", "span"), PARAMS,
                  ("#FLOPS", "flops_mean", "flops"), DEV, TEST]),
    "as_table3": ("Adaptive-span Table 3", [MODEL, ("Avg. span", "mean_span", "span"), DEV]),
    "th_table1": ("Talking-heads Table 1", [MODEL, ("h", "h", "text"), ("d_k", "d_k", "text"),
                  ("d_v", "d_v", "text"), PARAMS, MULTIPLIES, DEV, TEST]),
    "th_table3": ("Talking-heads Table 3", [MODEL, ("P_l", "P_l", "text"), ("P_w", "P_w", "text"),
                  ("h_k", "h_k", "text"), ("h", "h", "text"), ("h_v", "h_v", "text"), PARAMS,
                  MULTIPLIES, DEV, TEST]),
    "generic": ("Results", [MODEL, PARAMS, ("FLOPs/token", "flops", "flops"),
                ("Avg. span", "mean_span", "span"), DEV, TEST]),
}

# How a paper's table names a registered variant, by layout (display only: records, trial
# hashes and grid files keep the registry's name): talking-heads' baseline is multi-head
# attention, the registry's `fixed` (the fixed window, no mixing). Figures and MLflow's run
# names, groups and charts use the table's names (`display_name`).
PAPER_NAMES = {"th_table1": {"fixed": "multi-head"}, "th_table3": {"fixed": "multi-head"}}


def display_name(variant: str, layout: str) -> str:
    """A registered variant as the report names it under a grid whose table is `layout`
    (`PAPER_NAMES`; else its registry key): the one mapping that tables, figures and the
    MLflow run names, groups and charts share."""
    return PAPER_NAMES.get(layout, {}).get(variant, variant)


# The first figure of every report with claims (`bench.findings.presentation.figures.fig_claims`):
# each seed's value of a claim's metric, paired across the variants at each setting, with the
# verdicts
CLAIMS_FIGURE = "claims_per_seed"

# The figures a grid file may name (`report: {figures: [...]}`): name -> (file stem, height in
# inches at the paper's column width); `bench.findings.presentation.figures.fig_<name>` draws each.
FIGURES = {
    "span_limit": ("as_fig3_span_limit", 4.2),  # adaptive-span Figure 3
    "head_spans": ("as_fig4_head_spans", 1.8),  # adaptive-span Figure 4
    "dynamic_span": ("as_fig5_dynamic_span", 1.6),  # adaptive-span Figure 5
    "mixing": ("th_fig1_mixing", 1.8),  # talking-heads Figure 1
    "curves": ("learning_curves", 2.4),  # dev bpc during training
}
