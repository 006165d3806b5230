"""The measurement room: what a variant costs, measured side by side in one process: speed and
memory of the trainer's own step (`speed`), against outside implementations (`anchors`), and
counted against analytic FLOPs (`flops`). Imports the model and one-run rooms and the tracking
writer (a speed table logged to MLflow); nothing of sweeps or findings (the table in
pyproject.toml).
"""
