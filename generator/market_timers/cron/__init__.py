"""`check-cron`: how a cron line would have fared against the plan (check.py), for people
migrating from cron. It reads the plan and writes no unit, so it sits above schedule/, beside
controls/, not in it.
"""
