"""lintian on the built .deb: no error and no warning (overrides carry their reason)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import in_ci
from .debpkg import REPO

pytestmark = pytest.mark.e2e



def man_page_pending(tag: str) -> bool:
    """A no-manual-page warning for a command whose page is not in man/ yet."""
    if " no-manual-page [usr/bin/" not in tag:
        return False
    command = tag.rsplit("/", 1)[1].rstrip("]")
    return not (REPO / "man" / f"{command}.1").exists()


def test_lintian_reports_no_error_or_warning(deb_path: Path) -> None:
    if shutil.which("lintian") is None:
        if in_ci():
            pytest.fail("lintian is not installed (CI=true)", pytrace=False)
        pytest.skip("lintian is not installed")
    result = subprocess.run(["lintian", "--fail-on", "none", str(deb_path)],
                            capture_output=True, text=True, check=False, timeout=600)
    print(result.stdout)
    tags = [line for line in result.stdout.splitlines() if line.startswith(("E:", "W:"))]
    # Man pages are written separately (man/ is installed by glob); until a
    # command's page is in the repo the package cannot ship it. Nothing else is
    # tolerated, and a page that exists but is not installed still fails.
    pending = [tag for tag in tags if man_page_pending(tag)]
    if pending:
        print("[e2e] tolerated until their man page lands:\n" + "\n".join(pending))
    tags = [tag for tag in tags if tag not in pending]
    assert result.returncode == 0, result.stderr
    assert tags == []
