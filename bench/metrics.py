"""The names a trial run's numbers and marks go by, defined once below every room that reads or
writes them: the metrics it logs at each evaluation and at its end, the columns that hold its
seed, and the tags that say why it did not finish, which grid keys it varies and the plan it
serves. A grid's schema (`bench.experiment`) and the findings name them from here, the MLflow
writer logs them and the reader reads them back (`bench.tracking.names` holds the store's own
structure: roles, hashes, parent runs), so what a run measures does not depend on MLflow.
"""

# logged at each evaluation's step; peak_cuda_mb: CUDA only, the peak allocated since the
# previous evaluation
EVAL_METRICS = ("train_bpc", "dev_bpc", "lr", "mean_span", "tokens_per_s", "tokens",
                "train_time_s", "peak_rss_mb", "peak_cuda_mb")
# train()'s summaries logged at the end under their own names
FINAL_SAME = ("params", "params_non_embedding", "flops_full", "flops_mean", "flops_max",
              "flops_position", "flops_counted", "flops_executed", "flops_cache_reprojection",
              "floor_bpc", "entropy_rate", "steps")
# train()'s summaries whose per-evaluation metric has the same name: logged as final_<name>
# (peaks over the whole run; mean span over the dev split; tokens/s over all steps)
FINAL_RENAMED = ("mean_span", "tokens_per_s", "tokens", "peak_rss_mb", "peak_cuda_mb")
SEEDS = ("seed", "train.seed")  # a run's seed: the param, else the config's

# a trial run's tags that the findings read (as tags.<name> columns of its runs)
GRID_KEYS = "attnbench.grid_keys"  # the grid keys its grid varies, comma-separated
FAILURE = "attnbench.failure"  # why a trial failed or was interrupted
STOPPED = "attnbench.stopped"  # why the scheduler stopped a trial early
# + a record of the plan a trial run serves (`bench.findings.provenance.plan.record`)
PLAN = "attnbench.plan."
