"""Files on disk, written and read safely: the one atomic write and flock (atomicfile), walks and
opens under a directory others can write without following a symlink (safefs), and the flat JSON
record the runner writes without importing `json` (flatjson). Imports nothing of the package.
"""
