"""The operator's controls over the scheduled runs: pause, halt and resume (pause, halt, resume;
access: who may run them, on what), the halt alert policy (halt_alerts), halt-watch (haltwatch: a
cluster node's listener for halts), a manual run (manual_run: `run`; backfill: `run --from`) and
`try` (trial); operator names who runs them.

Above schedule/ (they read the plan and render units), below watch/ (status shows the controls in
force) and cli/ (which composes them).
"""
