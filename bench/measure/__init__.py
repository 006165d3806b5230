"""The measurement room: what a variant costs, measured side by side in one process: speed and
memory of the trainer's own step (`speed`), against outside implementations (`anchors`), and
counted against analytic FLOPs (`flops`). Imports the model and one-run rooms; nothing of
sweeps, tracking or findings (beyond logging a speed table to MLflow's store).
"""
