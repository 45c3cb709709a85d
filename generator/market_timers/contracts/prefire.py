"""The pre-fired unit's priority: what a job unit with a lead tells the runner beyond its
environment (MARKET_LEAD_SEC). render.py writes `Nice=PRE_FIRE_NICE` into it, so that the
runner's wake-up at the instant is not queued behind other work; the runner (runner/nice.py)
recognises that value and returns the job to DEFAULT_NICE, the value a unit without `Nice=`
runs at (a service inherits the service manager's, 0), unless a drop-in's `Nice=` set it.
"""

PRE_FIRE_NICE = -10
DEFAULT_NICE = 0
