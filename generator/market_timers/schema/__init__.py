"""How a config value or table is checked, and how a problem is reported: every problem names the
file, the key and the bad value, and all of them are collected before one error is raised
(problems), the one declaration of a table's keys and its parse (table), the checks of single
values (values), offsets and durations as written in the config (durations). The tables
themselves are declared with table.py in config/ and channels/ (config/tables.py lists them all).
"""
