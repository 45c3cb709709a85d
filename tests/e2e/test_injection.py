"""Config values on a real systemd (issue 9, critical): nothing injects a directive, and the job
receives every configured string exactly: its argv, its environment, its writable paths and its
unit's description, for values holding `% $ ${X} \\ " ' ; space tab é`.
"""

from __future__ import annotations

import json

import pytest

from .scenario import JOBS_DIR, Job, Scenario, instant_in, toml_value

pytestmark = pytest.mark.e2e

LEAD = 6  # seconds from now to the fire: sync takes about a second
PRINTER = f"{JOBS_DIR}/print-context"
# A writable path with a space and a `%` in it: ProtectSystem=strict makes everything else
# read-only, so the job can write its report there only if ReadWritePaths= was parsed right.
OUT_DIR = "/srv/e2e out 100%"
REPORT = f"{OUT_DIR}/report.json"

PRINTER_SCRIPT = r'''#!/opt/venvs/market-timers/bin/python3
"""Write argv[2:] and the V* environment as JSON into the file argv[1]."""
import json
import os
import sys

doc = {"argv": sys.argv[2:], "env": {k: v for k, v in os.environ.items() if k[:1] == "V"}}
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=True)
'''

VALUES = [
    "100%", "%n %i %%", "$5", "${X}", "$HOME", "$$", "back\\slash", "a\\nb", 'say "hi"',
    "it's", ";", "two words", "tab\there", "é", "  leading and trailing  ",
    "% $ ${X} \\ \" ' ; space\ttab é",
]
DESCRIPTION = "50% of the \"book\" \\ at $5 ; it's é"


class PrintJob(Job):
    def toml(self) -> str:
        return "\n".join([
            "[[job]]", f"name = {toml_value(self.name)}", 'event = "open"',
            f'offset = "+{self.offset}s"',
            f"command = {toml_value([PRINTER, REPORT, *VALUES])}",
            f"environment = {toml_value({f'V{i}': v for i, v in enumerate(VALUES)})}",
            f"read_write_paths = {toml_value([OUT_DIR])}",
            f"description = {toml_value(DESCRIPTION)}",
        ]) + "\n"


def test_job_receives_exactly_the_configured_argv_environment_and_paths(
    scenario: Scenario,
) -> None:
    box = scenario.box
    box.write_file(PRINTER, PRINTER_SCRIPT, mode=0o755)
    box.run(["rm", "-rf", OUT_DIR])
    box.run(["install", "-d", "-o", "market-jobs", "-g", "market-jobs", OUT_DIR])
    job = PrintJob("odd", instant_in(LEAD), [])
    scenario.schedule([job])
    record = scenario.wait_finished(job, LEAD + 20)
    assert record["result"] == "success", record

    got = json.loads(box.read_file(REPORT))
    assert got["argv"] == VALUES
    assert got["env"] == {f"V{i}": v for i, v in enumerate(VALUES)}
    description = box.show(job.service, "Description")
    assert description.endswith(" - " + DESCRIPTION), description


INJECTION = "x\nExecStartPre=+/bin/sh -c 'id > /var/tmp/pwned'\n#"


@pytest.mark.parametrize("line", [
    f"environment = {toml_value({'NOTE': INJECTION})}",
    f"description = {toml_value('joins the next line ' + chr(92))}",
    f"read_write_paths = {toml_value(['/srv/a' + INJECTION])}",
])
def test_a_value_that_would_inject_a_directive_is_refused_and_nothing_is_installed(
    scenario: Scenario, line: str,
) -> None:
    box = scenario.box
    box.run(["rm", "-f", "/var/tmp/pwned"])
    job = Job("inject", instant_in(3600), ["ok"])
    scenario.write_config([job], extra="")
    box.write_file("/etc/market-timers/market-timers.toml",
                   box.read_file("/etc/market-timers/market-timers.toml") + line + "\n")
    result = box.run(["market-timers", "sync"], check=False, timeout=120)
    assert result.returncode == 2, result
    assert "nothing was changed" in result.stderr
    assert not box.exists(f"/etc/systemd/system/{job.service}")
    assert not box.exists("/var/tmp/pwned")
