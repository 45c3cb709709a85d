"""What two or more flows agree on, each with one owner module: the unit <-> runner environment,
the names of the job units, `<state_dir>/plan.json`, exit codes, severities and the one text
form of an instant. Nothing here imports another flow; the runner loads parts of it on its hot
path, so this face imports nothing.
"""
