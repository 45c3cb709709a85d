"""The three severities of an alert or event, most urgent first, and their order: the config's
`severity` keys, the events spool, the router and the channels all use these and no others."""

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}  # higher: more urgent
