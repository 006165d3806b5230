"""MLflow's schema for attnbench, defined once: the writer logs these names, the reader (and
through it the report) reads them. What a run measures and the marks the findings read (its
metrics, seed, GRID_KEYS, FAILURE, STOPPED, PLAN) are named below every room, in
`bench.metrics`; this module names the store's own structure around them.

One experiment per grid; a parent run per sweep (tags ROLE=sweep, GRID, SWEEP_PROCESS,
SETTING=SWEEPS; LOST when a later sweep found its driver gone and ended it; the grid file and
TRIALS, the sweep's trial hashes, as artifacts) and a child run per trial (ROLE=trial, GRID,
HASH, GRID_KEYS, SETTING, FAILURE when it failed, IGNORED for grid options its variant does not
take, PLAN + each record of the plan it serves, the plan itself as its artifact PLANS, PLAN +
code_sha for the code its process imported, whose files' digests are its artifact CODE). Child
params: the flattened resolved config (model.n_heads, ...), seed, git_commit, code_version,
versions.<pkg>, dataset.<DATASET_KEYS>, the run's machine and precision (RUN_MACHINE) and
layer.* (the layer's own description);
metrics: EVAL_METRICS and dev_bpc.<probe> (on each probe's target symbols, the evaluated dev
prefix) at each evaluation's step, then the final ones under their own names (FINAL_SAME,
final_<FINAL_RENAMED>, final_dev_bpc, final_test_bpc, probe_bpc.<probe>, probe_floor.<probe>,
probe_gap.<probe> over the whole dev split, and test_probe_bpc.<probe>, test_probe_gap.<probe>
over the whole test split).
"""

from pathlib import Path

ROLE = "attnbench.role"  # "sweep" (parent run) or "trial" (child run)
GRID = "attnbench.grid"
HASH = "attnbench.trial_hash"
IGNORED = "attnbench.ignored"  # grid options the trial's variant does not take
PLUGINS = "attnbench.plugins"
SWEEP_PROCESS = "attnbench.process"  # a sweep run's driver: "<host>:<pid>" (is it still alive?)
LOST = "attnbench.lost"  # why a sweep run left RUNNING was ended (its driver is gone)
RAY_NODE, RAY_GCS, TRIAL_DIR = "attnbench.ray_node_id", "attnbench.ray_gcs", "attnbench.trial_dir"
# the GPUs Ray gave a trial (ids on its node; a shared one where resources.gpu < 1) and what
# CUDA_VISIBLE_DEVICES showed the trial's process: the only devices it could use
RAY_GPUS, VISIBLE = "attnbench.ray_gpu_ids", "attnbench.cuda_visible_devices"
FLOPS_ERROR = "attnbench.flops_error"  # why counting FLOPs failed (the results are kept)
MPS = "attnbench.mps"  # on a sweep's run: whether NVIDIA's MPS served its packed trials
# on a sweep's run, short for the UI's columns: each claim's verdict (tag VERDICT + claim id;
# metrics effect.<id> and p.<id>); what it has run (tags, rewritten at each look; TRIAL_COUNT
# and LOOKS also as metrics, a step per look) and where its trials ran
VERDICT = "verdict."
TRIAL_COUNT, LOOKS, SEEDS_RUN = "trials", "looks", "seeds"
# the runs table's groups (the experiment's view, `view.view_state`): a trial's setting (its name
# without the seed: `bench.trial.setting_name`); a sweep's run: SWEEPS, the group shown first
SETTING, SWEEPS = "setting", "sweep"
MACHINE, PRECISION = "machine", "precision"
PARENT = "mlflow.parentRunId"
TRIALS = "trials.json"  # the sweep run's artifact: the hashes of the trials the sweep covers
CODE = "code.json"  # a trial run's artifact: its code record, each file imported -> digest
PLANS = "plan.json"  # a trial run's artifact: the plan it serves as registered, by its plan_sha
# MLflow's UI opens an experiment of this kind on its runs (unset, 3.x opens the GenAI overview)
EXPERIMENT_KIND, TRAINING = "mlflow.experimentKind", "custom_model_development"
DATASET_KEYS = ("name", "n_bytes", "sha256", "prefix", "entropy_rate", "planted", "no_recall")
# what a run's numbers depend on beyond code, config and seed: params of every trial run
RUN_MACHINE = ("precision", "cpu_bf16", "cpu_capability", "gpu", "cpu")


def default_uri(results_dir: Path) -> str:
    """The default store: an sqlite file in the results folder (artifacts beside it)."""
    return f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"
