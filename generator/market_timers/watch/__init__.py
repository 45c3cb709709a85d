"""The watch: the dead-man check (miss -> deadman), the daily refresh and `status`."""
