"""The host the package runs on, as every flow sees it: its systemd manager (systemctl) and its
clock. Standard library only, at the bottom of the import contract, so that watch/, schedule/,
controls/ and cli/ use it downward.
"""
